"""The producer's outbox helper: put tasks in the ledger inside the caller's transaction.

``enqueue(session, "send_email", {"to": ...})`` runs one INSERT on the caller's
own Session or Connection (SQLAlchemy, or a raw psycopg 3 one: see
:mod:`ledgerq.ledger.executors`), through the seam's transaction-scoped part
(:class:`~ledgerq.ledger.protocol.TxLedger`; the statements in
:mod:`ledgerq.ledger.pg.tx`, or :mod:`ledgerq.ledger.mysql.tx` for a Session on
MySQL / MariaDB: :mod:`ledgerq.ledger.binds`), and does not commit: the task exists exactly when the
caller's business transaction commits, and never if it rolls back. Everything is
validated before the INSERT, so bad input raises
:class:`~ledgerq.core.errors.InvalidTaskError` and writes nothing.

De-duplication by ``business_key`` comes in two strengths. ``unique=True``: one
*live* task per (kind, key), through a partial unique index on the hot table;
once it finishes, the key is free again. ``once=True``: the key is *permanent*
(``ledgerq_unique_keys``, primary key (kind, key)), taken in the caller's
transaction with the new task's id, so a second enqueue of that kind and key
never creates a task, even years after the first finished or was purged.
Either way a duplicate inserts nothing and returns the id of the task holding
the key. Producers racing on one key agree through the index or the primary
key (the second waits for the first to commit or roll back), never through a
check-then-insert.

``parent_id`` makes the task a child of another (fan-out, migration 0010): the
ledger's insert trigger refuses a parent that does not exist
(:class:`~ledgerq.core.errors.UnknownParentError`) or whose family already
completed (:class:`~ledgerq.core.errors.FamilyCompletedError`); the statement
then failed, so the caller's transaction must be rolled back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ledgerq.ledger.binds import atx_for, tx_for
from ledgerq.ledger.executors import AsyncExecutor, Executor
from ledgerq.ledger.specs import BATCH_CHUNK as BATCH_CHUNK
from ledgerq.ledger.specs import EnqueueOptions as EnqueueOptions
from ledgerq.ledger.specs import RetryLike as RetryLike
from ledgerq.ledger.specs import TaskSpec as TaskSpec


def enqueue(executor: Executor, kind: str, payload: Any = None, **options: Any) -> int:
    """Insert one task in ``executor``'s transaction and return its id.

    With ``unique=True`` and a ``business_key``, a live task of the same kind and
    key is reused: its id is returned and nothing is inserted. With ``once=True``,
    the key is permanent: the id of the task that first took it is returned (even
    if that task finished long ago) and nothing is inserted.
    """
    tx = tx_for(executor, "enqueue")  # a wrong executor is refused before a bad task
    return tx.enqueue(TaskSpec(kind, payload, **options))


def enqueue_many(executor: Executor, specs: Iterable[TaskSpec]) -> list[int]:
    """Insert many tasks, one statement per 5,000; return the new ids in input order.

    Tasks skipped as duplicates (``unique=True`` or ``once=True``) are left out of the
    result.
    """
    return tx_for(executor, "enqueue_many").enqueue_many(specs)


async def aenqueue(executor: AsyncExecutor, kind: str, payload: Any = None, **options: Any) -> int:
    """:func:`enqueue` on an async executor (see :mod:`ledgerq.ledger.executors`)."""
    tx = atx_for(executor, "aenqueue")
    return await tx.enqueue(TaskSpec(kind, payload, **options))


async def aenqueue_many(executor: AsyncExecutor, specs: Iterable[TaskSpec]) -> list[int]:
    """:func:`enqueue_many` on an async executor (see :func:`aenqueue`)."""
    return await atx_for(executor, "aenqueue_many").enqueue_many(specs)
