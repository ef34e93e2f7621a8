from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledgerq.ledger.config import Settings
from tests.faults.cluster import Cluster

MakeCluster = Callable[..., Cluster]


@pytest.fixture
def make_cluster(settings: Settings, tmp_path: Path) -> Iterator[MakeCluster]:
    """Build (and by default start) a cluster of real processes for this test; every
    one is stopped (SIGTERM, then SIGKILL) whatever happens."""
    clusters: list[Cluster] = []

    def make(*, start: bool = True, **options: Any) -> Cluster:
        cluster = Cluster(settings, tmp_path, **options)
        clusters.append(cluster)
        return cluster.start() if start else cluster

    yield make
    for cluster in clusters:
        cluster.stop()
