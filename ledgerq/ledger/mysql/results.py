"""Waiting for a task's end on the MySQL ledger: :func:`wait` and :func:`await_result`,
what :func:`ledgerq.result` and :func:`ledgerq.aresult` run for a MySQL or MariaDB
bind, and the ``ended_results`` read the transaction-scoped part shares.

MySQL has no LISTEN/NOTIFY, so a waiter polls: it reads its task by primary key
(both tables, one statement: ``results.sql``) on a connection of its own, at
first every 10 ms, then 1.5 times longer each read, up to ``poll_s`` (1 s by
default). A short task's result comes back within a few tens of ms of its end;
a long one's at most ``poll_s`` after it. A smaller ``poll_s`` shortens the
wait at the cost of a read per interval per waiter (PostgreSQL's registry reads
all of a process's waiters in one statement, woken by NOTIFY; a waiter here
reads alone). Every read is counted (:data:`READS`, this process's: the
benchmark's ``reads`` figure).

Each read is its own transaction at READ COMMITTED (the ledger's engines set it),
ended at once: a waiter never holds a snapshot open while it sleeps, so InnoDB's
purge is never held back by it. A task not found on the first read is unknown
(:class:`~ledgerq.core.errors.TaskNotFoundError` at once, never a hang); one
found and later gone (purged by retention during the wait) is unknown too.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import URL, TextClause

from ledgerq.core.config import Settings
from ledgerq.ledger.mysql.base import aware, decoded, translated
from ledgerq.ledger.mysql.plans import Plan
from ledgerq.ledger.sql import load_in_lists
from ledgerq.ledger.task_result import TaskResult, children_params, not_found

#: The first poll's wait, and how much longer each next one waits (up to poll_s).
FIRST_POLL_S = 0.01
GROWTH = 1.5


@dataclass(frozen=True)
class ResultQueries:
    """``ledger/mysql/results.sql``."""

    ended_results: TextClause
    child_results: TextClause


RQ = load_in_lists(ResultQueries, "ledgerq.ledger.mysql", "results.sql")


class ReadCount:
    """Reads this process's waiters have taken (``result()`` may run in threads:
    counted under a lock, a read's round trip dwarfs it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._n = 0

    def add(self) -> None:
        with self._lock:
            self._n += 1

    @property
    def n(self) -> int:
        return self._n


#: Every waiter's reads in this process, for ``ledgerq bench --results``.
READS = ReadCount()


def connection_url(conn: Any) -> str:
    """The URL (password included) of a PyMySQL connection's database: the waiter
    opens connections of its own there."""

    def text(value: str | bytes | None) -> str | None:
        return value.decode() if isinstance(value, bytes) else value

    return URL.create(
        "mysql+pymysql", text(conn.user), text(conn.password) or None, conn.host, conn.port,
        text(conn.db),
    ).render_as_string(False)  # fmt: skip


def _task_result(row: Sequence[Any]) -> TaskResult:
    return TaskResult(
        id=int(row[0]),
        kind=str(row[1]),
        status=str(row[2]),
        value=decoded(row[3]),
        error=row[4],
        attempts=int(row[5]),
        max_attempts=None if row[6] is None else int(row[6]),
        created_at=aware(row[7]) or row[7],
        started_at=aware(row[8]),
        finished_at=aware(row[9]),
    )


def ended_results(ids: Sequence[int]) -> Plan[list[TaskResult]]:
    """Where each of ``ids`` stands (unknown ids left out), as a plan any runner drives."""
    wanted = sorted(set(ids))
    if not wanted:
        return []
    answer = yield RQ.ended_results, {"ids": wanted}
    return [_task_result(row) for row in answer.rows]


def child_results(parent_id: int, after: int, limit: int) -> Plan[list[TaskResult]]:
    """``ctx.children``: a page of ``parent_id``'s children, live and finished."""
    answer = yield RQ.child_results, children_params(parent_id, after, limit)
    return [_task_result(row) for row in answer.rows]


def _delays(poll_s: float) -> Iterator[float]:
    delay = min(FIRST_POLL_S, poll_s)
    while True:
        yield delay
        delay = min(delay * GROWTH, poll_s)


def _ended(found: list[TaskResult], task_id: int) -> TaskResult | None:
    if not found:
        raise not_found(task_id)
    return found[0] if found[0].done else None


def wait(settings: Settings, task_id: int, timeout: float | None, poll_s: float) -> TaskResult:
    """Block until ``task_id`` is terminal; :class:`TimeoutError` after ``timeout``
    seconds (None: no limit; 0: one look)."""
    from ledgerq.ledger.mysql.engines import sync_engine
    from ledgerq.ledger.mysql.plans import drive, runner

    deadline = None if timeout is None else time.monotonic() + timeout
    engine = sync_engine(settings, "ledgerq-result", pool_size=1)
    try:
        with translated(), engine.connect() as conn:
            for delay in _delays(poll_s):
                found = drive(ended_results([task_id]), runner(conn, "result"))
                READS.add()
                conn.rollback()  # no snapshot held while it sleeps
                done = _ended(found, task_id)
                if done is not None:
                    return done
                if deadline is not None and time.monotonic() + delay > deadline:
                    break  # raised outside translated(): a TimeoutError is an OSError
                time.sleep(delay)
    finally:
        engine.dispose()
    raise TimeoutError(f"task {task_id} did not end within {timeout} s")


async def await_result(
    settings: Settings, task_id: int, timeout: float | None, poll_s: float
) -> TaskResult:
    """:func:`wait` for async code: the event loop is never blocked."""
    from ledgerq.ledger.mysql.engines import async_engine
    from ledgerq.ledger.mysql.plans import adrive, async_runner

    deadline = None if timeout is None else time.monotonic() + timeout
    engine = async_engine(settings, "ledgerq-result", pool_size=1)
    try:
        with translated():
            async with engine.connect() as conn:
                for delay in _delays(poll_s):
                    found = await adrive(ended_results([task_id]), async_runner(conn, "aresult"))
                    READS.add()
                    await conn.rollback()
                    done = _ended(found, task_id)
                    if done is not None:
                        return done
                    if deadline is not None and time.monotonic() + delay > deadline:
                        break  # raised outside translated(): a TimeoutError is an OSError
                    await asyncio.sleep(delay)
    finally:
        await engine.dispose()
    raise TimeoutError(f"task {task_id} did not end within {timeout} s")
