from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ledger.config import Settings
from tests.faults.cluster import Cluster


@pytest.fixture
def cluster_factory(settings: Settings, tmp_path: Path) -> Iterator[list[Cluster]]:
    """Clusters a test starts; stopped (SIGTERM, then SIGKILL) whatever happens."""
    clusters: list[Cluster] = []
    yield clusters
    for cluster in clusters:
        cluster.stop()
