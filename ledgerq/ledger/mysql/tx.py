"""The seam's transaction-scoped part on MySQL / MariaDB: :class:`MyTx` and
:class:`MyAsyncTx`, on the caller's open transaction (a SQLAlchemy Session or
Connection, sync or async, or a raw DB-API connection: PyMySQL's, mysqlclient's,
aiomysql's or Django's on its MySQL backend, :mod:`ledgerq.ledger.mysql.raw`),
never beginning, committing or rolling back: a task enqueued here exists exactly
when the caller's transaction commits.

Built so far: the producer's ``enqueue`` and ``enqueue_many`` (``unique`` and
``once`` included; ``enqueue_many`` batches on MariaDB: :func:`inserts.enqueue_many`),
the worker's writes inside a handler's transaction (``succeed``,
``save_checkpoint``) and the batched window's row locks (``lock_running``:
:mod:`.window`), and the operator's in-transaction API (``list_tasks``,
``act``: :mod:`.operations_plans`, every batch in the caller's transaction,
which commits them all or none; ``release_key``: :func:`.keys.release`, the
release and its audit record committed or rolled back with the caller's
transaction). ``ended_results``, ``dependency_results``
(``ctx.dependencies``) and ``child_results`` (``ctx.children``) read. The rest of
:class:`~ledgerq.ledger.protocol.TxLedger` (the waiters' registry) raises
:class:`~ledgerq.core.errors.NotBuiltOnMySQLError` before it runs anything.

Isolation is the caller's: these statements run in whatever level the caller's
transaction has (MySQL's default is REPEATABLE READ). What they read to decide
is read with a lock (the insert's duplicate-key check, the holder's read
``LOCK IN SHARE MODE`` after it, ``lock_finishing``), which reads the latest
committed row whatever the transaction's snapshot, so the level changes how
long a producer waits, never what it decides. A ``unique`` task that meets a
live duplicate share-locks that task's row until the producer's transaction
ends: a worker finishing that task waits for the producer's commit.
PostgreSQL's ``ON CONFLICT DO NOTHING`` takes no such lock.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, Unpack

from ledgerq.core.errors import NotBuiltOnMySQLError
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.mysql import (
    attempts,
    dependencies,
    inserts,
    keys,
    operations,
    operations_plans,
    plans,
    results,
    window,
)
from ledgerq.ledger.options import AuditOptions
from ledgerq.ledger.protocol import Locked
from ledgerq.ledger.specs import TaskSpec, chunks
from ledgerq.ledger.task_result import TaskResult


def _not_built(what: str) -> NoReturn:
    raise NotBuiltOnMySQLError(f"{what}: not built on the MySQL ledger yet")


def _succeeded(fences: Sequence[Fence], results: Sequence[str | None] | None) -> list[Outcome]:
    values = results if results is not None else [None] * len(fences)
    return [Outcome.succeeded(f, r) for f, r in zip(fences, values, strict=True)]


class MyTx:
    """:class:`~ledgerq.ledger.protocol.TxLedger` on the caller's sync transaction;
    ``caller`` names the API function in a refusal of a wrong executor."""

    def __init__(self, executor: object, caller: str = "ledgerq") -> None:
        self._run = plans.runner(executor, caller)

    def enqueue(self, spec: TaskSpec) -> int:
        return plans.drive(inserts.enqueue_single(spec), self._run)

    def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        ids: list[int] = []
        for chunk in chunks(specs):
            ids.extend(plans.drive(inserts.enqueue_many(chunk), self._run))
        return ids

    def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        finished = plans.drive(attempts.finish(_succeeded(fences, results)), self._run)
        return {f.id for f in finished if f.status == "succeeded"}

    def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return plans.drive(attempts.save_checkpoint(fence, state_json), self._run)

    def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        limit = selection.limit or DEFAULT_LIMIT
        return operations.drive(operations_plans.list_tasks(selection, limit), self._run)

    def act(self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]) -> Report:
        return operations.drive(operations_plans.act(action, selection, **options), self._run)

    def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        return plans.drive(keys.release(key, **options), self._run)

    def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return plans.drive(window.lock_running(fences), self._run)

    def dependency_results(self, task_id: int) -> dict[int, Any]:
        return plans.drive(dependencies.dependency_results(task_id), self._run)

    def ended_results(self, ids: Sequence[int]) -> list[TaskResult]:
        return plans.drive(results.ended_results(ids), self._run)

    def child_results(self, parent_id: int, after: int = 0, limit: int = 100) -> list[TaskResult]:
        return plans.drive(results.child_results(parent_id, after, limit), self._run)

    def announce_waiting(self, registry: str, until_s: float) -> None:
        _not_built("result() waiters' registry (a waiter polls on MySQL: mysql/results.py)")

    def withdraw_waiting(self, registry: str) -> None:
        _not_built("result() waiters' registry (a waiter polls on MySQL: mysql/results.py)")


class MyAsyncTx:
    """:class:`~ledgerq.ledger.protocol.AsyncTxLedger` on the caller's async transaction."""

    def __init__(self, executor: object, caller: str = "ledgerq") -> None:
        self._run = plans.async_runner(executor, caller)

    async def enqueue(self, spec: TaskSpec) -> int:
        return await plans.adrive(inserts.enqueue_single(spec), self._run)

    async def enqueue_many(self, specs: Iterable[TaskSpec]) -> list[int]:
        ids: list[int] = []
        for chunk in chunks(specs):
            ids.extend(await plans.adrive(inserts.enqueue_many(chunk), self._run))
        return ids

    async def succeed(
        self, fences: Sequence[Fence], results: Sequence[str | None] | None = None
    ) -> set[int]:
        finished = await plans.adrive(attempts.finish(_succeeded(fences, results)), self._run)
        return {f.id for f in finished if f.status == "succeeded"}

    async def save_checkpoint(self, fence: Fence, state_json: str) -> bool:
        return await plans.adrive(attempts.save_checkpoint(fence, state_json), self._run)

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        limit = selection.limit or DEFAULT_LIMIT
        return await operations.adrive(operations_plans.list_tasks(selection, limit), self._run)

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[AuditOptions]
    ) -> Report:
        plan = operations_plans.act(action, selection, **options)
        return await operations.adrive(plan, self._run)

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        return await plans.adrive(keys.release(key, **options), self._run)

    async def lock_running(self, fences: Sequence[Fence]) -> Locked:
        return await plans.adrive(window.lock_running(fences), self._run)

    async def dependency_results(self, task_id: int) -> dict[int, Any]:
        return await plans.adrive(dependencies.dependency_results(task_id), self._run)

    async def ended_results(self, ids: Sequence[int]) -> list[TaskResult]:
        return await plans.adrive(results.ended_results(ids), self._run)

    async def child_results(
        self, parent_id: int, after: int = 0, limit: int = 100
    ) -> list[TaskResult]:
        return await plans.adrive(results.child_results(parent_id, after, limit), self._run)

    async def announce_waiting(self, registry: str, until_s: float) -> None:
        _not_built("result() waiters' registry (a waiter polls on MySQL: mysql/results.py)")

    async def withdraw_waiting(self, registry: str) -> None:
        _not_built("result() waiters' registry (a waiter polls on MySQL: mysql/results.py)")


if TYPE_CHECKING:  # mypy checks both against the transaction-scoped protocols
    from ledgerq.ledger.protocol import AsyncTxLedger, TxLedger

    _sync: type[TxLedger] = MyTx
    _async: type[AsyncTxLedger] = MyAsyncTx
