"""Fan-out with completion, on the real pipeline.

A parent spawns children with ``ctx.spawn`` (or a producer names it with
``parent_id``); when the parent and every child are terminal, the ledger's
history trigger (migration 0010) enqueues exactly one ``on_children_done``
callback with the children's counts by outcome. The callbacks of
``tests.apps.fanout_app`` record their payloads in ``fanout_callbacks``, so a
second callback would show as a second row.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue
from ledgerq.consumers.registry import default_registry
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import FamilyCompletedError, UnknownParentError
from ledgerq.ledger.actions import Action
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import sync_engine
from tests.apps import fanout_app
from tests.apps.fanout_app import CALLBACKS_DDL
from tests.harness import Pipeline, db, enqueue_committed
from tests.support import ledgerq, ledgerq_env

WORKER = WorkerConfig(concurrency=16, lease_s=30, heartbeat_s=1, grace_s=5)


def callbacks(settings: Settings) -> list[dict[str, Any]]:
    with db(settings) as conn:
        return [
            dict(row[0]) for row in conn.execute("SELECT payload FROM fanout_callbacks ORDER BY id")
        ]


@pytest.fixture
def fanout_settings(settings: Settings) -> Iterator[Settings]:
    assert fanout_app.parent is not None  # the app's kinds are in the default registry
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS fanout_callbacks")
        conn.execute(CALLBACKS_DDL)
    yield settings


async def wait_for_callbacks(
    pipe: Pipeline, settings: Settings, count: int, timeout: float = 90
) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(got := callbacks(settings)) < count:
        assert time.monotonic() < deadline, f"{len(got)} callbacks after {timeout} s: {got}"
        await pipe.relay.run_once()
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)  # a second callback would have had time to come
    await pipe.relay.run_once()
    return callbacks(settings)


async def test_a_parent_gets_one_callback_with_the_counts(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    [parent] = enqueue_committed(
        fanout_settings, [TaskSpec("fan.parent", {"n": 20, "fail": [3, 7]})]
    )
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        got = await wait_for_callbacks(pipe, fanout_settings, 1)
    assert got == [{"parent_id": parent, "succeeded": 18, "dead": 2, "cancelled": 0}]
    children = await ledger.children(parent)
    assert len(children) == 20


async def test_a_producer_child_needs_a_known_parent(fanout_settings: Settings) -> None:
    engine = sync_engine(fanout_settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, pytest.raises(UnknownParentError, match="123456"):
            enqueue(session, "fan.child", {}, parent_id=123456)
    finally:
        engine.dispose()


async def test_a_late_child_of_a_completed_family_is_refused(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    [parent] = enqueue_committed(fanout_settings, [TaskSpec("fan.parent", {"n": 2})])
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        await wait_for_callbacks(pipe, fanout_settings, 1)
    engine = sync_engine(fanout_settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, pytest.raises(FamilyCompletedError):
            enqueue(session, "fan.child", {}, parent_id=parent)
    finally:
        engine.dispose()


async def test_nested_families_each_get_their_callback(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    extra = [["fan.mid", {"n": 3, "fail": [0]}], ["fan.mid", {"n": 2}]]
    [parent] = enqueue_committed(
        fanout_settings, [TaskSpec("fan.parent", {"n": 4, "fail": [1], "extra": extra})]
    )
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        got = await wait_for_callbacks(pipe, fanout_settings, 3)
    by_parent = {c["parent_id"]: c for c in got}
    assert len(got) == 3 and len(by_parent) == 3
    assert by_parent.pop(parent) == {
        "parent_id": parent, "succeeded": 5, "dead": 1, "cancelled": 0
    }  # fmt: skip
    assert sorted((c["succeeded"], c["dead"]) for c in by_parent.values()) == [(2, 0), (2, 1)]


async def test_cascade_cancel_reaches_live_descendants_and_the_callback_counts_them(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    extra = [["fan.mid", {"n": 3, "slow": [0, 1]}]]
    spec = TaskSpec("fan.parent", {"n": 5, "slow": [2, 3], "fail": [4], "extra": extra})
    [parent] = enqueue_committed(fanout_settings, [spec])
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        # Until only the slow ones (2 children, 2 grandchildren) are live.
        deadline = time.monotonic() + 30
        while True:
            await pipe.relay.run_once()
            shown = await ledger.find(parent)
            family = shown["children"]
            if shown["status"] == "succeeded" and family and family["total"] == 6:  # noqa: SIM102
                # The parent's two slow children run, and so do fan.mid's two slow
                # grandchildren: nothing else is still waiting to run (fan.mid's quick
                # third child may otherwise be cancelled too).
                if family["by_status"].get("running") == 2:
                    live = await ledger.list_tasks(
                        TaskFilter(statuses=("pending", "published", "running"))
                    )
                    if sorted(t["status"] for t in live) == ["running"] * 4:
                        break
            assert time.monotonic() < deadline, shown
            await asyncio.sleep(0.05)
        assert family["by_status"] == {"running": 2, "succeeded": 3, "dead": 1}
        report = await ledger.act(
            Action.cancel(cascade=True), TaskFilter(ids=(parent,)), actor="test"
        )
        assert report.cascaded == 4 and report.changed == 0  # the parent had succeeded
        got = await wait_for_callbacks(pipe, fanout_settings, 2)
    by_parent = {c["parent_id"]: c for c in got}
    assert by_parent[parent] == {"parent_id": parent, "succeeded": 3, "dead": 1, "cancelled": 2}
    [mid] = [c for p, c in by_parent.items() if p != parent]
    assert (mid["succeeded"], mid["dead"], mid["cancelled"]) == (1, 0, 2)
    shown = await ledger.find(parent)
    assert shown["children"]["by_status"] == {"succeeded": 3, "dead": 1, "cancelled": 2}
    assert shown["children"]["callback_id"] is not None
    audit = shown["audit"]
    assert audit and audit[0]["action"] == "cancel"
    result = ledgerq(fanout_settings, "show", str(parent))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "6: 3 succeeded, 1 dead, 2 cancelled; callback task" in result.stdout


def _workers(settings: Settings, n: int, log: Path) -> list[subprocess.Popen[str]]:
    """``n`` worker processes of the fan-out app, their output appended to ``log``
    (a file, not a pipe: nothing has to read it while they run)."""
    with log.open("a") as out:
        return [
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "ledgerq",
                    "worker",
                    "--app",
                    "tests.apps.fanout_app",
                    "--concurrency",
                    "32",
                    "--grace",
                    "5",
                ],
                env=ledgerq_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for _ in range(n)
        ]


def _stop(workers: Sequence[subprocess.Popen[str]]) -> None:
    for proc in workers:
        proc.send_signal(signal.SIGTERM)
    for proc in workers:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sleep", [0.0, 0.02], ids=["tiny", "short"])
async def test_500_children_on_three_worker_processes_get_one_callback(
    fanout_settings: Settings, ledger: PgLedger, sleep: float, tmp_path: Path
) -> None:
    fail = list(range(0, 500, 25))  # 20 dead
    slow = list(range(7, 500, 50))  # 10 run until cancelled
    [parent] = enqueue_committed(
        fanout_settings,
        [TaskSpec("fan.parent", {"n": 500, "fail": fail, "slow": slow, "sleep": sleep})],
    )
    workers = _workers(fanout_settings, 3, tmp_path / "workers.log")
    try:
        async with Pipeline(fanout_settings, default_registry, start_worker=False) as pipe:
            deadline = time.monotonic() + 90
            while True:
                await pipe.relay.run_once()
                family = (await ledger.find(parent))["children"]
                if (
                    family
                    and family["by_status"].get("running", 0) == 10
                    and (family["by_status"].get("succeeded", 0) == 470)
                ):
                    break
                assert time.monotonic() < deadline, family
                await asyncio.sleep(0.05)
            report = await ledger.act(Action.cancel(), TaskFilter(kind="fan.slow"), actor="test")
            assert report.asked_to_stop == 10
            got = await wait_for_callbacks(pipe, fanout_settings, 1)
    finally:
        _stop(workers)
    assert got == [{"parent_id": parent, "succeeded": 470, "dead": 20, "cancelled": 10}]


async def test_an_operator_can_retry_a_dead_child_after_its_family_completed(
    fanout_settings: Settings, ledger: PgLedger
) -> None:
    [parent] = enqueue_committed(fanout_settings, [TaskSpec("fan.parent", {"n": 2, "fail": [0]})])
    async with Pipeline(fanout_settings, default_registry, worker=WORKER) as pipe:
        await wait_for_callbacks(pipe, fanout_settings, 1)
        [dead] = [c["id"] for c in await ledger.children(parent) if c["status"] == "dead"]
        report = await ledger.act(Action.retry(), TaskFilter(ids=(dead,)), actor="test")
        assert report.changed == 1
        assert await pipe.settle([dead]) == {dead: "dead"}  # it fails again, as it must
        got = await wait_for_callbacks(pipe, fanout_settings, 1)
    assert len(got) == 1  # the family completed once: no second callback
