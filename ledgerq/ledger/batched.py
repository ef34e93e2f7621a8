"""An operator's action on the ledger's own connection, one transaction a batch:
:func:`act_in_batches`, every server's ``act`` (PostgreSQL's
:mod:`ledgerq.ledger.pg.operations`, MySQL's :mod:`ledgerq.ledger.mysql.operations`),
whatever its plan (:func:`ledgerq.ledger.actions.walk` with the server's
statements) and the driver that runs it.

Contract: the plan's batch boundaries (its ``None`` steps) commit, then
``progress`` (if any) hears the report so far; the end commits too. So a bulk
action never holds its locks past one batch, and an action interrupted half-way
leaves its committed batches and an audit record that counts them. A statement's
error propagates (the open batch rolls back with the connection).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.options import BatchedActOptions, PlanOptions

#: A server's plan of an action (its generator).
P = TypeVar("P")


async def act_in_batches(
    conn: AsyncConnection,
    action: Action,
    options: BatchedActOptions,
    start: Callable[[Report, PlanOptions], P],
    run: Callable[[P, Callable[[], Awaitable[None]]], Awaitable[Report]],
) -> Report:
    """``action`` on the ledger's own connection ``conn``: ``start`` makes the server's
    plan (given the :class:`Report` it fills and the plan's options, ``progress``
    taken out), ``run`` drives it on ``conn`` with the commit to call at each batch
    boundary. Returns the plan's report."""
    report = Report(action.name)
    progress = options.pop("progress", None)
    planned: PlanOptions = options  # the rest, progress taken out, are the plan's
    steps = start(report, planned)

    async def commit() -> None:
        await conn.commit()
        if progress is not None:
            progress(report)

    done = await run(steps, commit)
    await conn.commit()
    return done
