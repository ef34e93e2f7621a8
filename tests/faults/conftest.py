from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from ledgerq.ledger.config import Settings
from tests.faults.cluster import Cluster, MakeCluster


@pytest.fixture
async def make_cluster(settings: Settings, tmp_path: Path) -> AsyncIterator[MakeCluster]:
    """Build (and by default start) a cluster of real processes for this test; every
    one is stopped (SIGTERM, then SIGKILL), and its reconciler closed, whatever
    happens."""
    clusters: list[Cluster] = []

    async def make(*, start: bool = True, **options: Any) -> Cluster:
        cluster = Cluster(settings, tmp_path, **options)
        clusters.append(cluster)
        await cluster.open()
        return cluster.start() if start else cluster

    yield make
    for cluster in clusters:
        await cluster.stop()
