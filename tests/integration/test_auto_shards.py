"""``ledgerq worker --shards auto`` (issue 28 item 7): the live workers split the
shards among themselves by rendezvous hashing over their liveness rows, and a
SIGKILLed member's shards are served by the survivor within seconds.

Real relay and worker processes (the fault suite's :class:`Cluster`, on the
shared broker under this test's own prefix) with the default 60 s lease; the
test runs the reconciler itself once a second, as ``ledgerq reconcile --every 1``
would, and restarts nothing.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import httpx
import pytest

from ledgerq import TaskSpec, admin
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.sharding import shard_of
from tests.faults.cluster import WORKER_ARGS, Cluster, check, terminal_count
from tests.harness import enqueue_committed
from tests.support import ledgerq

SHARDS = 16
#: The fault suite's worker with the default lease (60 s), serving --shards auto.
AUTO_WORKER = (
    *("60" if i > 0 and WORKER_ARGS[i - 1] == "--lease" else a for i, a in enumerate(WORKER_ARGS)),
    "--shards",
    "auto",
)
#: The survivor serves every shard within the dead worker's liveness silence
#: (5 s), one membership refresh (2 s) and one reconciler pass (1 s), about 8 s: the
#: bound only has to stay below the 60 s lease (what the survivor would wait without
#: the liveness rows), with room for a loaded 2-core machine.
BOUND_S = 40.0


async def _held(ledger: PgLedger) -> dict[str, frozenset[int]]:
    """The live subscriptions' shards, by worker."""
    return {
        row["worker"]: frozenset(row["shards"] or ())
        for row in await ledger.subscriptions()
        if row["live"]
    }


async def _reconcile_until(cluster: Cluster, done, timeout: float) -> float:  # type: ignore[no-untyped-def]
    """Reconcile once a second until ``await done()``; the seconds it took."""
    started = time.monotonic()
    last = 0.0
    while not await done():
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not done within {timeout} s")
        if time.monotonic() - last >= 1.0:
            last = time.monotonic()
            await cluster.reconcile()
        await asyncio.sleep(0.1)
    return time.monotonic() - started


def _tasks(settings: Settings, first: int, n: int) -> list[int]:
    return enqueue_committed(
        settings,
        [TaskSpec("fault.write", {"n": i}, shard_key=f"key-{i}") for i in range(first, first + n)],
    )


async def test_auto_workers_split_the_shards_and_the_survivor_takes_a_dead_ones_within_seconds(
    settings: Settings, ledger: PgLedger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERQ_SHARDS", str(SHARDS))  # the test's enqueues and the processes
    cluster = await Cluster(settings, tmp_path, workers=2, worker_args=AUTO_WORKER).open()
    try:
        await cluster.start().ready()

        async def split() -> bool:
            held = await _held(ledger)
            return len(held) == 2 and sum(map(len, held.values())) == SHARDS

        await _reconcile_until(cluster, split, timeout=30)
        held = await _held(ledger)
        first, second = held.values()
        assert first | second == frozenset(range(SHARDS)) and not first & second, held
        assert first and second, held  # 16 shards: an empty share is a 1 in 2**15 chance
        stats = (await admin.astats(settings)).to_json()  # ledgerq stats --json: who holds what
        assert {w["worker"]: frozenset(w["shards"]) for w in stats["workers"]} == held
        assert all(w["auto"] for w in stats["workers"]), stats["workers"]
        # The dashboard's overview says the same, on the page a person reads.
        page = await _overview_page(ledger)
        for worker, shards in held.items():
            row = page.split(worker, 1)[1].split("</tr>", 1)[0]
            assert ", ".join(map(str, sorted(shards))) in row and "(auto" in row, row

        ids = _tasks(settings, 0, 64)
        assert {shard_of(f"key-{i}", 0, SHARDS) for i in range(64, 128)} == set(range(SHARDS))
        await _reconcile_until(
            cluster, lambda: _all_terminal(cluster, ids), timeout=60
        )  # both workers ran tasks of their own shards

        victim = cluster.members[1].proc
        survivor = cluster.members[2].proc
        assert victim is not None and survivor is not None
        assert cluster.kill("worker-0", signal.SIGKILL)
        killed_at = time.monotonic()
        later = _tasks(settings, 64, 64)

        async def survivor_holds_all() -> bool:
            held = await _held(ledger)
            return list(held.values()) == [frozenset(range(SHARDS))] and all(
                f":{survivor.pid}:" in worker for worker in held
            )

        await _reconcile_until(cluster, survivor_holds_all, timeout=45)
        took = time.monotonic() - killed_at
        await _reconcile_until(cluster, lambda: _all_terminal(cluster, later), timeout=45)
        ran = time.monotonic() - killed_at
        print(
            f"survivor held every shard {took:.1f} s after the SIGKILL; tasks done at {ran:.1f} s"
        )
        assert took < BOUND_S, took
        assert ran < BOUND_S + 15, ran  # below the 60 s lease still

        everything = [*ids, *later]
        verdict = await check(settings, ledger, everything, effects_expected=everything)
        # Each task terminal once with one effect. Only the dead worker's route queue
        # keeps messages: those published to it before the kill, whose rows the
        # reconciler took back (their epoch bumped), so they would claim nothing.
        assert verdict.terminal == {"succeeded": len(everything)}, verdict.as_dict()
        left = (verdict.lost, verdict.live_left, verdict.effect_duplicates)
        assert left == ([], 0, 0), verdict.as_dict()
        assert (verdict.missing_effects, verdict.expired_running) == (0, 0), verdict.as_dict()
        assert not cluster.internal_errors(), cluster.internal_errors()
        with_shards = await _shards_run_by(ledger, later)
        assert with_shards == {f":{survivor.pid}:"}, with_shards
    finally:
        await cluster.stop()


async def _overview_page(ledger: PgLedger) -> str:
    """The dashboard's overview, rendered by the real app over ASGI."""
    app = create_app(ledger, DashboardSettings(token="t" * 24), secrets=[])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        page = await client.get("/", headers={"Authorization": "Bearer " + "t" * 24})
    assert page.status_code == 200, page.text
    return page.text.split('id="serving"', 1)[1]


async def _all_terminal(cluster: Cluster, ids: list[int]) -> bool:
    return await terminal_count(cluster.ledger, ids) == len(ids)


async def _shards_run_by(ledger: PgLedger, ids: list[int]) -> set[str]:
    """The process (``:pid:``) of each task's last attempt."""
    pids = set()
    for task_id in ids:
        row = await ledger.show(task_id)
        worker = row["attempt_log"][-1]["worker"]
        pids.add(":" + worker.split(":")[1] + ":")
    return pids


def test_shards_auto_refuses_direct_claims_in_one_line(settings: Settings) -> None:
    done = ledgerq(
        settings, "worker", "--app", "tests.apps.slow_app", "--shards", "auto", "--direct"
    )
    assert done.returncode == 64  # EX_USAGE
    assert "cannot be given --kinds or --shards" in " ".join(done.stderr.split())
