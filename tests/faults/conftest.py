"""The fault suite runs on a RabbitMQ node of its own (see ``tests/rabbit.py``):
it restarts its broker and lowers its consumer timeout, which must never touch
the machine's shared node while anything else uses it. PostgreSQL is the
suite's usual test database; the faults there (killed backends) are aimed at
the services' own connections only."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledgerq.core.config import Settings
from tests import rabbit
from tests.faults.cluster import COMBINED_RUNS, Cluster, MakeCluster
from tests.rabbit import RabbitNode


@pytest.fixture(scope="session")
def broker_node() -> Iterator[RabbitNode]:
    if not rabbit.available():
        pytest.fail("the fault suite needs the RabbitMQ server installed (scripts/test.sh does it)")
    home = rabbit.workdir("ledgerq-faults-")
    node = RabbitNode(home / "rabbitmq")
    try:
        yield node.start()
    finally:
        node.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="session")
def base_settings(base_settings: Settings, broker_node: RabbitNode) -> Settings:
    """The suite's settings, with the fault suite's own broker."""
    return replace(base_settings, amqp_url=broker_node.url)


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
        return await cluster.start().ready() if start else cluster

    yield make
    for cluster in clusters:
        await cluster.stop()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Totals over the session's combined runs (one line each, then the sum)."""
    runs = COMBINED_RUNS
    if not runs:
        return
    write = terminalreporter.write_line
    write(f"combined fault runs: {len(runs)}")
    for run in runs:
        faults = Counter(f.split()[0] for f in run["faults"])
        write(
            f"  seed {run['seed']}: {run['tasks']} tasks in {run['seconds']} s; "
            + ", ".join(f"{n} {kind}" for kind, n in sorted(faults.items()))
            + f"; verdict ok={run['verdict']['ok']}"
        )
    faults = Counter(f.split()[0] for run in runs for f in run["faults"])
    totals = {
        "runs": len(runs),
        "tasks": sum(r["tasks"] for r in runs),
        "ok": sum(bool(r["verdict"]["ok"]) for r in runs),
        "faults": dict(sorted(faults.items())),
        "expired_leases": sum(r["reconciler"]["expired"] for r in runs),
        "released_as_suspects": sum(r["reconciler"]["released"] for r in runs),
        "republished": sum(r["reconciler"]["republished"] for r in runs),
        "seconds": round(sum(r["seconds"] for r in runs), 1),
    }
    write("combined totals: " + json.dumps(totals))
