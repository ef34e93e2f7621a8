"""The operator's Python API inside a transaction the caller owns.

Like ``enqueue``, these take the caller's open Session or Connection (sync:
SQLAlchemy ``Session``/``Connection`` or ``psycopg.Connection``; async:
``AsyncSession``/``AsyncConnection`` or ``psycopg.AsyncConnection``; see
:mod:`ledgerq.ledger.executors`) and never begin, commit or roll back::

    from ledgerq import Action, TaskFilter, act

    with Session(engine) as session, session.begin():
        report = act(session, Action.cancel(), TaskFilter(kind="send_sms",
                     statuses=("pending",)), actor="ops:alice", reason="provider down")
    print(report.changed)

Everything the action does, its audit record included, commits or rolls back
with the caller's transaction: one transaction however many tasks match, so
for bulk work on a large ledger prefer
:meth:`~ledgerq.ledger.pg.operations.PgOperations.act` (what ``ledgerq tasks``
runs), which commits every :data:`~.actions.BATCH_SIZE` tasks.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from ledgerq.ledger.actions import Action, Report, Rows, Step, plan, task_row
from ledgerq.ledger.executors import (
    AsyncExecutor,
    AsyncRunner,
    Executor,
    Runner,
    async_runner,
    runner,
)
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.sql import OQ

#: What a plan returns: an action's :class:`Report`, a :class:`KeyRelease`.
R = TypeVar("R")


def drive(steps: Generator[Step | None, Rows, R], run: Runner) -> R:
    """Run a plan's statements with ``run``; batch boundaries are the caller's business."""
    try:
        step = next(steps)
        while True:
            step = steps.send([] if step is None else run(*step))
    except StopIteration as stop:
        report: R = stop.value
        return report


async def adrive(
    steps: Generator[Step | None, Rows, R],
    run: AsyncRunner,
    commit: Callable[[], Awaitable[None]] | None = None,
) -> R:
    """:func:`drive` with an async runner; ``commit`` (if any) is awaited at each batch
    boundary."""
    try:
        step = next(steps)
        while True:
            if step is None:
                if commit is not None:
                    await commit()
                step = steps.send([])
            else:
                step = steps.send(await run(*step))
    except StopIteration as stop:
        report: R = stop.value
        return report


def act(
    executor: Executor,
    action: Action,
    selection: TaskFilter,
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> Report:
    """Apply ``action`` to the tasks ``selection`` matches, in the caller's transaction."""
    steps = plan(action, selection, actor=actor, reason=reason, dry_run=dry_run)
    return drive(steps, runner(executor, "act"))


async def aact(
    executor: AsyncExecutor,
    action: Action,
    selection: TaskFilter,
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> Report:
    """:func:`act` on an async executor."""
    steps = plan(action, selection, actor=actor, reason=reason, dry_run=dry_run)
    return await adrive(steps, async_runner(executor, "aact"))


def release_key(
    executor: Executor,
    key: str,
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> KeyRelease:
    """Release ordering ``key`` from the dead tasks that hold it (:mod:`.keys`), in the
    caller's transaction."""
    steps = release_plan(key, actor=actor, reason=reason, dry_run=dry_run)
    return drive(steps, runner(executor, "release_key"))


async def arelease_key(
    executor: AsyncExecutor,
    key: str,
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
) -> KeyRelease:
    """:func:`release_key` on an async executor."""
    steps = release_plan(key, actor=actor, reason=reason, dry_run=dry_run)
    return await adrive(steps, async_runner(executor, "arelease_key"))


def list_tasks(executor: Executor, selection: TaskFilter) -> list[dict[str, Any]]:
    """The tasks ``selection`` matches, newest first (at most its limit, else 50)."""
    rows = runner(executor, "list_tasks")(OQ.list_tasks, _list_params(selection))
    return [task_row(r) for r in rows]


async def alist_tasks(executor: AsyncExecutor, selection: TaskFilter) -> list[dict[str, Any]]:
    """:func:`list_tasks` on an async executor."""
    rows = await async_runner(executor, "alist_tasks")(OQ.list_tasks, _list_params(selection))
    return [task_row(r) for r in rows]


def _list_params(selection: TaskFilter) -> dict[str, Any]:
    return selection.params(selection.limit or DEFAULT_LIMIT)
