"""A task's next attempt never starts while code of its previous attempt still
runs anywhere (issue 28 item 4; docs/guarantees.md, "Attempts never overlap").

With ``timeout=1``, a sync handler that sleeps 3 s used to have its retry start
while its thread still slept, and run to its end beside it. Now the timed-out
attempt keeps its lease until its thread returns, and its outcome (the retry)
is written only then. A thread that outlives its timeout by the hang limit ends
its worker process (exit 70); the task is then rescued by the reconciler and
retried by another worker, never beside the hung code. An async handler is
cancelled at its timeout, and its cancellation has run through it before the
retry is written.

Attempts are recorded by the handlers themselves through a connection of their
own (``tests.apps.overlap_app``), on the database's clock.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import psycopg
import pytest

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.compose import open_reconciler
from ledgerq.consumers.hung import EXIT_HUNG
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.states import TERMINAL
from ledgerq.relay.reconciler import ReconcilerConfig
from tests.apps.overlap_app import ATTEMPTS_DDL
from tests.harness import Pipeline, db, enqueue_committed
from tests.support import spawn

#: (attempt, pid, started_at, ended_at) of a task's attempts, in order.
Attempt = tuple[int, int, datetime, datetime | None]


@pytest.fixture
def attempts_table(settings: Settings) -> Iterator[Settings]:
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS test_attempts")
        conn.execute(ATTEMPTS_DDL)
    yield settings
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS test_attempts")


def attempts(settings: Settings, task_id: int) -> list[Attempt]:
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT attempt, pid, started_at, ended_at FROM test_attempts "
            "WHERE task_id = %s ORDER BY started_at",
            (task_id,),
        ).fetchall()
    return [(int(a), int(p), s, e) for a, p, s, e in rows]


@pytest.fixture
async def services() -> AsyncIterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.terminate()
        for process in started:
            try:
                await asyncio.to_thread(process.communicate, timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


async def _until(what: str, check: Any, timeout: float, services: list[Any]) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        found = await check()
        if found:
            return found
        if time.monotonic() > deadline:
            for process in services:
                if process.poll() is None:
                    process.kill()
            said = "\n---\n".join(p.communicate(timeout=10)[0] for p in services)
            raise AssertionError(f"timed out waiting for {what}; the services said:\n{said}")
        await asyncio.sleep(0.1)


def _worker(settings: Settings, *extra: str) -> subprocess.Popen[str]:
    args = ("--app", "tests.apps.overlap_app", "--concurrency", "2", "--lease", "2", *extra)
    return spawn(settings, "worker", *args)


async def test_a_sync_attempt_past_its_timeout_ends_before_its_retry_starts(
    attempts_table: Settings, ledger: PgLedger, services: list[subprocess.Popen[str]]
) -> None:
    settings = attempts_table
    [task_id] = enqueue_committed(
        settings, [TaskSpec("test.overrun", {"seconds": 3}, max_attempts=2, retry=[0])]
    )
    services.append(spawn(settings, "relay", "--poll-interval", "0.2"))
    services.append(_worker(settings))

    async def settled() -> str | None:
        status = (await ledger.whereabouts([task_id])).get(task_id)
        return status if status in TERMINAL else None

    assert await _until("the task to end", settled, 60, services) == "dead"

    async def both_ended() -> list[Attempt] | None:
        ran = attempts(settings, task_id)
        return ran if len(ran) == 2 and all(end for *_, end in ran) else None

    (a1, _, _, end1), (a2, _, start2, _) = await _until("both ends", both_ended, 10, services)
    assert (a1, a2) == (1, 2)
    assert end1 is not None and start2 >= end1  # the retry started after the first had ended
    shown = await ledger.show(task_id)
    first = shown["attempt_log"][0]
    assert "timed out after 1" in first["error"]
    assert datetime.fromisoformat(first["ended_at"]) >= end1  # written once its thread returned


async def test_a_thread_past_the_hang_limit_ends_its_worker_and_the_retry_runs_elsewhere(
    attempts_table: Settings, ledger: PgLedger, services: list[subprocess.Popen[str]]
) -> None:
    settings = attempts_table
    [task_id] = enqueue_committed(
        settings,
        [TaskSpec("test.overrun", {"seconds": 120, "first_only": True}, retry=[0])],
    )
    services.append(spawn(settings, "relay", "--poll-interval", "0.2"))
    hung = _worker(settings, "--hang-limit", "2")
    services.append(hung)

    async def exited() -> bool:
        return hung.poll() is not None

    await _until("the hung worker to exit", exited, 60, services)
    # Nothing retried the task while its first attempt's code ran: it is still
    # running on the dead worker's lease, and only the first attempt ever started.
    assert hung.returncode == EXIT_HUNG
    assert (await ledger.whereabouts([task_id]))[task_id] == "running"
    [(attempt, pid, _, ended)] = attempts(settings, task_id)
    assert (attempt, pid, ended) == (1, hung.pid, None)  # killed with its process
    assert hung.stdout is not None
    said = hung.stdout.read()
    assert said.count("past its timeout; ending the worker") == 1, said

    services.append(_worker(settings))
    config = ReconcilerConfig(stall_s=2.0, settle_s=2.0)
    async with open_reconciler(settings, config) as reconciler:

        async def rescued() -> str | None:
            await reconciler.run_once()
            status = (await ledger.whereabouts([task_id])).get(task_id)
            return status if status in TERMINAL else None

        assert await _until("the task to be rescued", rescued, 60, services) == "succeeded"
    (_, pid1, _, end1), (_, pid2, _, end2) = attempts(settings, task_id)
    assert pid1 == hung.pid and pid2 != pid1 and end1 is None and end2 is not None


async def test_an_async_attempt_is_cancelled_at_its_timeout_before_its_retry_starts(
    attempts_table: Settings, ledger: PgLedger
) -> None:
    settings = attempts_table
    ran: list[tuple[int, float, float]] = []
    registry = Registry()

    @registry.task("t.slow", timeout=1)
    async def slow(payload: Any, ctx: AsyncTaskContext) -> None:
        started = time.monotonic()
        try:
            await asyncio.sleep(60)  # far past its timeout: only the cancellation ends it
        finally:  # the cancellation's cleanup takes a while: the retry must wait for it
            await asyncio.sleep(0.5)
            ran.append((ctx.attempt, started, time.monotonic()))

    [task_id] = enqueue_committed(settings, [TaskSpec("t.slow", {}, max_attempts=2, retry=[0])])
    config = WorkerConfig(concurrency=2, lease_s=30, heartbeat_s=5, grace_s=5)
    async with Pipeline(settings, registry, worker=config) as pipe:
        await pipe.settle([task_id])
    shown = await ledger.show(task_id)
    assert (shown["status"], shown["attempts"]) == ("dead", 2)
    (a1, start1, end1), (a2, start2, _) = ran
    assert (a1, a2) == (1, 2)
    # cancelled at 1 s, then its cleanup ran (the lower bound); the upper bound tells a
    # cancellation from the 60 s sleep run out, generous for a loaded machine
    assert 1.4 <= end1 - start1 < 15
    assert start2 >= end1
