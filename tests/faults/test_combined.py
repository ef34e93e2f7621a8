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

import asyncio
import json
import os
import random
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue
from ledgerq.ledger.config import Settings
from ledgerq.ledger.pg.engines import sync_engine
from ledgerq.ledger.shard_ids import shard_of_id
from tests.conftest import drop_database
from tests.faults.cluster import COMBINED_RUNS, Cluster, MakeCluster, check, terminal_count
from tests.faults.outages import kill_backends, restart_broker
from tests.harness import enqueue_committed
from tests.rabbit import RabbitNode
from tests.shard_dbs import create_shards, shard_urls


@dataclass
class Fault:
    at: float  # fraction of tasks finished when it fires
    kind: str  # worker_kill | broker_restart | db_kill | relay_kill
    target: str = ""


def schedule(rng: random.Random, workers: int, worker_kills: int, db_kills: int) -> list[Fault]:
    faults = [
        Fault(rng.uniform(0.05, 0.9), "worker_kill", f"worker-{rng.randrange(workers)}")
        for _ in range(worker_kills)
    ]
    faults += [Fault(rng.uniform(0.1, 0.85), "db_kill") for _ in range(db_kills)]
    faults.append(Fault(rng.uniform(0.2, 0.6), "broker_restart"))
    faults.append(Fault(rng.uniform(0.1, 0.8), "relay_kill", "relay"))
    return sorted(faults, key=lambda f: f.at)


def rolled_back(settings: Settings, n: int) -> None:
    """Producers whose business transactions fail: their tasks must never run."""
    engine = sync_engine(settings, "ledgerq-test-rollback", pool_size=1)
    with Session(engine) as session:
        for i in range(n):
            session.begin()
            enqueue(session, "fault.write", {"marker": "rolled-back", "n": i})
            session.rollback()
    engine.dispose()


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
) -> None:
    faults = schedule(random.Random(seed), workers, worker_kills, db_kills)
    print(f"\ncombined run: seed={seed} tasks={tasks} workers={workers}")
    for fault in faults:
        print(f"  at {fault.at:5.1%}: {fault.kind} {fault.target}")
    cluster = await make_cluster(workers=workers)
    started = time.monotonic()
    ids: list[int] = []
    shards = settings.ledger_shards()
    for chunk in range(0, tasks, 500):
        # With ledger shards, each chunk is one producer transaction on the next shard.
        shard = shards[(chunk // 500) % len(shards)]
        ids += enqueue_committed(
            shard,
            [
                TaskSpec("fault.write", {"n": i, "sleep": 0.002}, retry=[0.2], max_attempts=10)
                for i in range(chunk, min(chunk + 500, tasks))
            ],
        )
        rolled_back(shard, 10)
    pending = list(faults)
    fired: list[str] = []

    async def tick(elapsed: float) -> None:
        done = await terminal_count(cluster.ledger, ids) / len(ids)
        while pending and done >= pending[0].at:
            fault = pending.pop(0)
            if fault.kind in ("worker_kill", "relay_kill"):
                # Restart what died first, so every kill lands on a live process
                # (when faults bunch up, on one still starting: a crash at start-up).
                cluster.supervise()
                landed = cluster.kill(fault.target, signal.SIGKILL)
                assert landed, f"{fault.target} was not running when its kill came"
            elif fault.kind == "db_kill":
                kill_backends(settings)
            else:
                await asyncio.to_thread(restart_broker, broker_node)
            fired.append(f"{fault.kind} {fault.target} at {done:.1%} ({elapsed:.1f}s)")

    # A fault whose threshold the drain jumped past still fires (at 100%, as the
    # summary shows) rather than never.
    await cluster.settle(ids, timeout=300, tick=tick, hold=lambda: bool(pending))
    elapsed = time.monotonic() - started
    verdict = await check(settings, cluster.ledger, ids, effects_expected=ids)
    exits = await cluster.stop()
    summary = {
        "seed": seed,
        "tasks": len(ids),
        "by_ledger_shard": dict(sorted(Counter(shard_of_id(i) for i in ids).items())),
        "seconds": round(elapsed, 1),
        "faults": fired,
        "restarts": {role: len(codes) - 1 for role, codes in exits.items()},
        "reconciler": {
            "passes": len(cluster.reconciles),
            "republished": sum(c.republished for c in cluster.reconciles),
            "expired": sum(c.expired for c in cluster.reconciles),
            "released": sum(c.released for c in cluster.reconciles),
            "overdue_published": sum(c.overdue_published for c in cluster.reconciles),
        },
        "verdict": verdict.as_dict(),
    }
    print(json.dumps(summary, indent=2))
    COMBINED_RUNS.append(summary)
    assert not cluster.internal_errors(), cluster.internal_errors()
    assert verdict.ok, summary
    assert verdict.terminal == {"succeeded": len(ids)}


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
