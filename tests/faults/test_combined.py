"""The combined run: thousands of tasks through repeated worker kills, a broker
restart, killed database connections and a relay kill, then the total-queue check.

The fault schedule is drawn from a seed (``LEDGERQ_FAULT_SEED``, else random) and
printed with the result; faults fire at fractions of progress, not at times, so
a seed replays the same schedule on a slow or a fast machine. The short run is
part of the default suite; ``pytest --long`` (``./scripts/test.sh --long``)
runs twenty more, on consecutive seeds from ``LEDGERQ_FAULT_SEED_BASE`` (else
random), and the session ends with the totals of every combined run
(``tests/faults/conftest.py``).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.split.ids import shard_of_id
from tests import postgres, rabbit
from tests.conftest import delete_broker_objects, drop_database, routed_queues
from tests.faults.chaos import Chaos, Producer, schedule
from tests.faults.cluster import COMBINED_RUNS, Cluster, MakeCluster, check
from tests.faults.history import check_histories, load_histories
from tests.faults.xmin import Hold
from tests.postgres import PgServer
from tests.rabbit import RabbitNode
from tests.shard_dbs import create_shards, shard_urls


async def run_combined(
    settings: Settings,
    make_cluster: MakeCluster,
    broker_node: RabbitNode,
    *,
    tasks: int,
    workers: int,
    worker_kills: int,
    db_kills: int,
    seed: int,
    server: PgServer | None = None,
    pg_restarts: int = 0,
    hold: Hold | None = None,
) -> None:
    """The run. With ``server`` (the suite's own PostgreSQL, tests/postgres.py) it
    may restart the database (``pg_restarts``); with ``hold`` the tasks are produced
    at a steady rate, the other faults fire first, then the xmin hold
    (tests/faults/chaos.py)."""
    assert not pg_restarts or server is not None, "restarts need the suite's own server"
    total = hold.tasks if hold else tasks
    faults = schedule(random.Random(seed), workers, worker_kills, db_kills, pg_restarts)
    print(f"\ncombined run: seed={seed} tasks={total} workers={workers} hold={hold}")
    for fault in faults:
        print(f"  at {fault.at:5.1%}: {fault.kind} {fault.target}")
    cluster = await make_cluster(workers=workers)
    started = time.monotonic()
    chaos = Chaos(cluster, Producer(settings), faults, total, hold, broker_node, server)
    if hold is None:
        chaos.producer.upto(total)
    ids = chaos.producer.ids
    # A fault whose threshold the drain jumped past still fires (at 100%, as the
    # summary shows) rather than never.
    try:
        await cluster.settle(ids, timeout=300 + total / 50, tick=chaos.tick, hold=chaos.busy)
    finally:
        if chaos.phases is not None:
            chaos.phases.holder.release()
    elapsed = time.monotonic() - started
    verdict = await check(settings, cluster.ledger, ids, effects_expected=ids)
    history = check_histories(await load_histories(settings, cluster.ledger, ids))
    exits = await cluster.stop()
    summary: dict[str, Any] = {
        "seed": seed,
        "tasks": len(ids),
        "by_ledger_shard": dict(sorted(Counter(shard_of_id(i) for i in ids).items())),
        "seconds": round(elapsed, 1),
        "faults": chaos.fired,
        "restarts": {role: len(codes) - 1 for role, codes in exits.items()},
        "reconciler": {
            "passes": len(cluster.reconciles),
            "republished": sum(c.republished for c in cluster.reconciles),
            "expired": sum(c.expired for c in cluster.reconciles),
            "released": sum(c.released for c in cluster.reconciles),
            "overdue_published": sum(c.overdue_published for c in cluster.reconciles),
        },
        "verdict": verdict.as_dict(),
        "history": history.as_dict(),
    }
    if chaos.phases is not None:
        summary["xmin"] = chaos.phases.summary()
    print(json.dumps(summary, indent=2))
    COMBINED_RUNS.append(summary)
    assert not cluster.internal_errors(), cluster.internal_errors()
    assert verdict.ok, summary
    assert history.ok, summary
    assert verdict.terminal == {"succeeded": len(ids)}
    if chaos.phases is not None:
        recovery = summary["xmin"]["recovery_s"]
        assert recovery is not None and recovery <= 60, summary["xmin"]


def _seed(variable: str) -> int:
    return int(os.environ.get(variable) or random.randrange(2**32))


#: The short run's size and fault counts (with and without ledger shards).
SHORT: dict[str, Any] = {
    "tasks": 2000,
    "workers": 3,
    "worker_kills": 4,
    "db_kills": 3,
    "seed": _seed("LEDGERQ_FAULT_SEED"),
}


async def test_combined_short(
    settings: Settings, make_cluster: MakeCluster, broker_node: RabbitNode
) -> None:
    await run_combined(settings, make_cluster, broker_node, **SHORT)


@pytest.fixture
async def sharded(settings: Settings) -> AsyncIterator[Settings]:
    """The test's settings over two fresh ledger shards (the suite's database is not one)."""
    yield create_shards(settings, 2, tag="f")
    for url in shard_urls(settings, 2, tag="f"):
        drop_database(url)


async def test_combined_on_two_ledger_shards(
    sharded: Settings, broker_node: RabbitNode, tmp_path: Path
) -> None:
    """The short run on a ledger split across two databases: one relay process
    serving both shards, workers claiming on the shard each id names, a reconciler
    per shard; the same total-queue check over both databases."""
    clusters: list[Cluster] = []

    async def make(**options: Any) -> Cluster:
        cluster = Cluster(sharded, tmp_path, **options)
        clusters.append(cluster)
        await cluster.open()
        return await cluster.start().ready()

    try:
        await run_combined(sharded, make, broker_node, **SHORT)
    finally:
        for cluster in clusters:
            await cluster.stop()
    assert COMBINED_RUNS[-1]["by_ledger_shard"] == {0: 1000, 1: 1000}


LONG_BASE = _seed("LEDGERQ_FAULT_SEED_BASE")


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", range(20), ids=lambda n: f"run{n + 1:02d}")
async def test_combined_long(
    settings: Settings, make_cluster: MakeCluster, broker_node: RabbitNode, run: int
) -> None:
    await run_combined(
        settings,
        make_cluster,
        broker_node,
        tasks=3000,
        workers=3,
        worker_kills=6,
        db_kills=4,
        seed=(LONG_BASE + run) % 2**32,
    )


@pytest.fixture(scope="module")
def own_server() -> Iterator[PgServer]:
    """A PostgreSQL of the fault suite's own (tests/postgres.py): the restart
    fault restarts it, never the shared server."""
    if not postgres.available():
        pytest.fail("the restart fault needs the PostgreSQL server binaries installed")
    home = rabbit.workdir("ledgerq-faults-pg-")
    server = PgServer(home)
    try:
        yield server.start()
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def own_settings(own_server: PgServer, base_settings: Settings) -> AsyncIterator[Settings]:
    """A fresh, migrated ledger on the suite's own server, the suite's broker, a
    private AMQP prefix."""
    url = own_server.create_database("ledgerq_faults_own")
    settings = replace(
        base_settings, database_url=url, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}"
    )
    upgrade(settings)
    yield settings
    delete_broker_objects(settings, routed_queues(settings))


@pytest.fixture
async def own_cluster(own_settings: Settings, tmp_path: Path) -> AsyncIterator[MakeCluster]:
    clusters: list[Cluster] = []

    async def make(**options: Any) -> Cluster:
        cluster = Cluster(own_settings, tmp_path, **options)
        clusters.append(cluster)
        await cluster.open()
        return await cluster.start().ready()

    yield make
    for cluster in clusters:
        await cluster.stop()


#: The default suite's restart runs: the short run's faults, fewer, and a
#: PostgreSQL restart (the 60 s xmin hold runs under --long only: each such run
#: lasts over two minutes).
RESTART: dict[str, Any] = {"tasks": 1000, "workers": 3, "worker_kills": 3, "db_kills": 2}
RESTART_BASE = _seed("LEDGERQ_FAULT_SEED")


@pytest.mark.timeout(600)
@pytest.mark.parametrize("run", range(3), ids=lambda n: f"seed{n + 1}")
async def test_combined_over_a_postgres_restart(
    own_settings: Settings,
    own_server: PgServer,
    own_cluster: MakeCluster,
    broker_node: RabbitNode,
    run: int,
) -> None:
    await run_combined(
        own_settings,
        own_cluster,
        broker_node,
        **RESTART,
        seed=(RESTART_BASE + run) % 2**32,
        server=own_server,
        pg_restarts=1,
    )


@pytest.mark.long
@pytest.mark.timeout(900)
@pytest.mark.parametrize("run", range(20), ids=lambda n: f"run{n + 1:02d}")
async def test_combined_restart_and_xmin_hold_long(
    own_settings: Settings,
    own_server: PgServer,
    own_cluster: MakeCluster,
    broker_node: RabbitNode,
    run: int,
) -> None:
    await run_combined(
        own_settings,
        own_cluster,
        broker_node,
        tasks=0,
        workers=3,
        worker_kills=6,
        db_kills=4,
        seed=(LONG_BASE + 1000 + run) % 2**32,
        server=own_server,
        pg_restarts=2,
        hold=Hold(),
    )
