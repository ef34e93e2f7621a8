"""The operator's Python API inside a transaction the caller owns.

Like ``enqueue``, these take the caller's open Session or Connection (sync:
SQLAlchemy ``Session``/``Connection`` or ``psycopg.Connection``; async:
``AsyncSession``/``AsyncConnection`` or ``psycopg.AsyncConnection``; see
:mod:`ledgerq.ledger.executors`; on a MySQL / MariaDB ledger the executors
``enqueue`` takes there, raw PyMySQL, mysqlclient, aiomysql and Django
connections included) and never begin, commit or roll back::

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

Each function runs through the seam's transaction-scoped part
(:class:`~ledgerq.ledger.protocol.TxLedger`; on PostgreSQL
:mod:`ledgerq.ledger.pg.tx`, on MySQL / MariaDB :mod:`ledgerq.ledger.mysql.tx`),
which drives the plan on the caller's transaction.
"""

from __future__ import annotations

from typing import Any, Unpack

from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.binds import atx_for, tx_for
from ledgerq.ledger.executors import (
    AsyncExecutor,
    Executor,
)
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.options import AuditOptions


def act(
    executor: Executor, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]
) -> Report:
    """Apply ``action`` to the tasks ``selection`` matches, in the caller's transaction.
    ``options``: ``actor`` (required), ``reason``, ``dry_run``
    (:class:`~.options.AuditOptions`)."""
    return tx_for(executor, "act").act(action, selection, **options)


async def aact(
    executor: AsyncExecutor, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]
) -> Report:
    """:func:`act` on an async executor."""
    return await atx_for(executor, "aact").act(action, selection, **options)


def release_key(executor: Executor, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
    """Release ordering ``key`` from the dead tasks that hold it (:mod:`.keys`), in the
    caller's transaction; ``options`` as :func:`act`'s."""
    return tx_for(executor, "release_key").release_key(key, **options)


async def arelease_key(
    executor: AsyncExecutor, key: str, **options: Unpack[AuditOptions]
) -> KeyRelease:
    """:func:`release_key` on an async executor."""
    return await atx_for(executor, "arelease_key").release_key(key, **options)


def list_tasks(executor: Executor, selection: TaskFilter) -> list[dict[str, Any]]:
    """The tasks ``selection`` matches, newest first (at most its limit, else 50)."""
    return tx_for(executor, "list_tasks").list_tasks(selection)


async def alist_tasks(executor: AsyncExecutor, selection: TaskFilter) -> list[dict[str, Any]]:
    """:func:`list_tasks` on an async executor."""
    return await atx_for(executor, "alist_tasks").list_tasks(selection)
