"""The seam's transaction-scoped part on PostgreSQL: :class:`PgTx` and
:class:`PgAsyncTx` (:class:`~ledgerq.ledger.protocol.TxLedger`,
:class:`~ledgerq.ledger.protocol.AsyncTxLedger`).

Each is built on the caller's open transaction (a SQLAlchemy Session or
Connection, or a psycopg 3 connection: :mod:`ledgerq.ledger.executors`) and
never begins, commits or rolls back: what it writes commits or rolls back with
the caller's work. The worker's terminal status in a handler's transaction
(``finish`` with a ``succeeded`` verdict, fenced), the window's row locks and a
checkpoint written inside the window run their named statements here; the
producer's insert and the operator's plans (``enqueue_many``, ``act``,
``release_key``, ``list_tasks``) are driven on the same runner by
:mod:`ledgerq.ledger.producer` and :mod:`ledgerq.ledger.operations`. Races are
the statements' own: every write is a compare-and-set on (id, epoch, status),
and a lost fence returns nothing (the caller rolls its transaction back).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ledgerq.ledger import operations, producer
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.executors import (
    AsyncExecutor,
    Executor,
    Rows,
    async_runner,
    runner,
)
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.params import fence_params, outcome_params
from ledgerq.ledger.producer import TaskSpec
from ledgerq.ledger.protocol import Locked
from ledgerq.ledger.sql import Q


def _succeeded(fences: Sequence[Fence], results: Sequence[str | None] | None) -> dict[str, Any]:
    values = results if results is not None else [None] * len(fences)
    return outcome_params([Outcome.succeeded(f, r) for f, r in zip(fences, values, strict=True)])


def _locked(rows: Rows) -> Locked:
    """``lock_running``'s rows (id, pid, began), by position (raw psycopg rows too)."""
    holder = (int(rows[0][1]), rows[0][2]) if rows else None
    return Locked({int(r[0]) for r in rows}, holder)


def _checkpoint(fence: Fence, state_json: str) -> dict[str, Any]:
    return {"id": fence[0], "epoch": fence[1], "checkpoint": state_json}


class PgTx:
    """:class:`~ledgerq.ledger.protocol.TxLedger` on the caller's sync transaction;
    ``caller`` names the API function in a refusal of a wrong executor."""

    def __init__(self, executor: Executor, caller: str = "ledgerq") -> None:
        self._executor = executor
        self._run = runner(executor, caller)

    def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        return producer.enqueue_many(self._executor, specs)

    def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        return operations.list_tasks(self._executor, selection)

    def act(
        self,
        action: Action,
        selection: TaskFilter,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> Report:
        return operations.act(
            self._executor, action, selection, actor=actor, reason=reason, dry_run=dry_run
        )

    def release_key(
        self, key: str, *, actor: str, reason: str | None = None, dry_run: bool = False
    ) -> KeyRelease:
        return operations.release_key(
            self._executor, key, actor=actor, reason=reason, dry_run=dry_run
        )

    def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        return {int(r[0]) for r in self._run(Q.finish, _succeeded(fences, results))}

    def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return _locked(self._run(Q.lock_running, fence_params(fences)))

    def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return bool(self._run(Q.save_checkpoint, _checkpoint(fence, state_json)))


class PgAsyncTx:
    """:class:`~ledgerq.ledger.protocol.AsyncTxLedger` on the caller's async transaction."""

    def __init__(self, executor: AsyncExecutor, caller: str = "ledgerq") -> None:
        self._executor = executor
        self._run = async_runner(executor, caller)

    async def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        return await producer.aenqueue_many(self._executor, specs)

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        return await operations.alist_tasks(self._executor, selection)

    async def act(
        self,
        action: Action,
        selection: TaskFilter,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
    ) -> Report:
        return await operations.aact(
            self._executor, action, selection, actor=actor, reason=reason, dry_run=dry_run
        )

    async def release_key(
        self, key: str, *, actor: str, reason: str | None = None, dry_run: bool = False
    ) -> KeyRelease:
        return await operations.arelease_key(
            self._executor, key, actor=actor, reason=reason, dry_run=dry_run
        )

    async def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        return {int(r[0]) for r in await self._run(Q.finish, _succeeded(fences, results))}

    async def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return _locked(await self._run(Q.lock_running, fence_params(fences)))

    async def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return bool(await self._run(Q.save_checkpoint, _checkpoint(fence, state_json)))


if TYPE_CHECKING:  # mypy checks both against the transaction-scoped protocols
    from ledgerq.ledger.protocol import AsyncTxLedger, TxLedger

    _sync: type[TxLedger] = PgTx
    _async: type[AsyncTxLedger] = PgAsyncTx
