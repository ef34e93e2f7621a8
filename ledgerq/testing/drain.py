"""Run the due tasks in the test's own process: :func:`drain` and :func:`adrain`.

Each task goes through the worker's own path, not a copy of it:

* claimed by the direct path's statement (``PgLedger.claim_due``,
  ledger/direct.sql): the relay's due rule (pauses, ordering keys, rate limits in
  the database, aging, priority, run_at), epoch + 1, ``running``, attempts + 1;
* run by the worker's :class:`~ledgerq.consumers.execute.TaskRunner`: async
  handlers on the loop, sync ones in a pool thread (one), the task's and the
  handler's timeouts, ``ctx.session`` committing the handler's writes with
  ``succeeded``, ``Abort``, ``Cancelled``, results, checkpoints;
* written by the finish statement (``PgLedger.finish``): the fenced
  compare-and-set to ``succeeded``, a retry (``pending`` with the policy's
  delay), ``dead`` or ``cancelled``.

One task at a time, so a handler's children and callbacks run in the same drain
when they are due, in the order a worker would take them. What it does not do:
heartbeats (an operator's cancel request reaches a running handler only at
its end), progress reports (kept in memory, never written), batched windows
(``group_commit`` kinds run one by one), periodic schedules (enqueue the task
yourself), and rate limits of the registry (it writes the kinds' ordering and
``on_children_done`` settings, as a worker does at start, but not their rate
limits, so a test is not throttled; limits already in the database apply).
A sync handler that outlives its timeout is waited for, as a worker waits; the
worker's hard cap (ending the process) is replaced by a log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import os
import socket
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from ledgerq.alerting.alerts import log_alert
from ledgerq.compose.storage import own_ledger_on
from ledgerq.consumers.context import HandlerContext
from ledgerq.consumers.execute import TaskRunner
from ledgerq.consumers.handoff import Committed
from ledgerq.consumers.registry import Registry, default_registry
from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.binds import on_mysql
from ledgerq.ledger.executors import async_runner, runner
from ledgerq.ledger.model import ClaimedTask, Fence, Outcome
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.testing.binds import Target, in_transaction, resolve
from ledgerq.testing.queries import HelperQueries, helper_params, helper_queries
from ledgerq.testing.tasks import run_sync, selection

if TYPE_CHECKING:
    from ledgerq.ledger.mysql import MyLedger
    from ledgerq.ledger.pg import PgLedger

    OwnLedger = PgLedger | MyLedger

log = logging.getLogger("ledgerq.testing")

#: The worker name a drained task's row carries.
WORKER = f"ledgerq.testing@{socket.gethostname()}:{os.getpid()}"
#: The lease a drained task holds (no heartbeat renews it; no reconciler should run).
LEASE_S = 600.0
#: The statuses a run ends in, as :class:`Run` names them (``pending`` is a retry).
STATUS_NAMES = {"pending": "retried"}


@dataclass(frozen=True)
class Run:
    """One attempt the drain ran: ``status`` is ``succeeded``, ``retried``, ``dead``,
    ``cancelled``, or ``lost`` (another actor moved the task meanwhile)."""

    id: int
    kind: str
    attempt: int
    status: str
    #: The recorded error (the handler's exception and innermost frames), else None.
    error: str | None


@dataclass(frozen=True)
class DrainResult:
    """What a drain ran, counted by how each attempt ended."""

    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    cancelled: int = 0
    #: Every attempt, in the order run.
    runs: tuple[Run, ...] = ()
    #: True when the drain stopped at ``max_tasks`` with tasks still due.
    limited: bool = False
    #: Tasks that ended cancelled because their expiry passed before they started
    #: (never run, so not attempts: not in ``cancelled`` nor ``runs``).
    expired: int = 0

    @property
    def ran(self) -> int:
        return len(self.runs)

    @property
    def errors(self) -> list[Run]:
        """The attempts that recorded an error (retried, dead or cancelled)."""
        return [r for r in self.runs if r.error is not None]

    def counts(self) -> dict[str, int]:
        return {
            "succeeded": self.succeeded,
            "retried": self.retried,
            "dead": self.dead,
            "cancelled": self.cancelled,
        }


class NoHandlerError(LedgerqError):
    """Tasks are due of kinds no handler is registered for: ``kinds`` counts them;
    ``result`` is what the drain had run before it found them (nothing, if they
    were due at its start)."""

    def __init__(self, message: str, kinds: Mapping[str, int], result: DrainResult) -> None:
        super().__init__(message)
        self.kinds = dict(kinds)
        self.result = result


class UncommittedTasksError(LedgerqError):
    """The bind's open transaction holds tasks it has not committed: a worker could
    not see them, and neither can the drain."""


@dataclass
class _Keeper:
    """Checkpoints stored at once (fenced, autocommit), as the worker's lease keeping
    stores them; progress reports kept in memory (no heartbeat writes them)."""

    ledger: OwnLedger
    loop: asyncio.AbstractEventLoop | None
    reports: dict[Fence, str] = field(default_factory=dict)

    def attach(self, task: ClaimedTask, ctx: HandlerContext) -> None:
        ctx._keeper = self

    def progress(self, fence: Fence, report: str) -> None:
        self.reports[fence] = report

    async def save(self, fence: Fence, state_json: str) -> bool:
        return await self.ledger.save_checkpoint(fence, json.loads(state_json))


@dataclass
class _Drain:
    ledger: OwnLedger
    runner: TaskRunner
    registry: Registry
    kinds: frozenset[str] | None
    queues: list[str] | None
    include_future: bool
    #: The statements of the ledger's server (testing.sql or testing_mysql.sql).
    mysql: bool = False
    runs: list[Run] = field(default_factory=list)
    limited: bool = False
    expired: int = 0

    def result(self) -> DrainResult:
        counts = Counter(r.status for r in self.runs)
        return DrainResult(
            counts["succeeded"],
            counts["retried"],
            counts["dead"],
            counts["cancelled"],
            tuple(self.runs),
            self.limited,
            self.expired,
        )

    @property
    def claimable(self) -> frozenset[str]:
        return self.kinds if self.kinds is not None else frozenset(self.registry.kinds())

    async def due_queues(self) -> list[str]:
        """The queues with due tasks of claimable kinds; NoHandlerError for due tasks
        of kinds without a handler (when every kind is drained)."""
        rows = await self._rows("due_kinds", {"queues": self.queues})
        queues, unhandled = set(), Counter[str]()
        for row in rows:
            queue, kind, n = tuple(row)
            if kind in self.claimable:
                queues.add(queue)
            elif self.kinds is None:
                unhandled[kind] += int(n)
        if unhandled:
            names = ", ".join(f"{k!r} ({n})" for k, n in sorted(unhandled.items()))
            raise NoHandlerError(
                f"due tasks of kinds with no registered handler: {names}; import the module "
                "that registers them (or pass app=), or drain only some kinds (kinds=[...])",
                unhandled,
                self.result(),
            )
        return sorted(queues)

    async def run(self, max_tasks: int) -> DrainResult:
        while True:
            expire = getattr(self.ledger, "expire_due", None)
            if expire is not None:  # not on MySQL, where expiry is refused at enqueue
                # what the reconciler's expiry service does: expired tasks end, unrun
                self.expired += len(await expire(500))
            queues = await self.due_queues()
            if queues and len(self.runs) >= max_tasks:
                self.limited = True
                break
            claimed = []
            if queues:
                claimed = await self.ledger.claim_due(
                    queues, 1, WORKER, LEASE_S, aging_s=DEFAULT_AGING_S, kinds=self.claimable
                )
            if claimed:
                await self.run_one(claimed[0])
            elif not (self.include_future and await self.skip_ahead()):
                break
        return self.result()

    async def skip_ahead(self) -> bool:
        """Move time to the next drained task's due time; False if none is waiting."""
        params = {"queues": self.queues, "kinds": sorted(self.claimable)}
        seconds = (await self._rows("next_due_in", params))[0][0]
        if seconds is None:
            return False
        await self._rows("advance", {**params, "seconds": float(seconds) + 0.001})
        return True

    async def _rows(self, name: str, params: dict[str, Any]) -> Sequence[Any]:
        """Run the helpers' statement ``name`` of the ledger's server."""
        statement = getattr(helper_queries(self.mysql), name)
        return await self.ledger._rows(statement, helper_params(params, self.mysql))

    async def run_one(self, task: ClaimedTask) -> None:
        result = await self.runner.run(task, lambda: None)
        status, error = "lost", None
        if isinstance(result, Committed):
            status = "succeeded" if result.won else "lost"
        elif isinstance(result, Outcome):
            finished = await self.ledger.finish([result])
            error = result.error
            if finished:
                row = finished[0]
                status, error = STATUS_NAMES.get(row.status, row.status), row.last_error
                if row.status == "dead":
                    log_alert(row)  # the worker's default alert: one log line
        self.runs.append(Run(task.id, task.kind, task.attempts, status, error))


def _registry(app: Registry | str | None) -> Registry:
    if app is None:
        return default_registry
    if isinstance(app, Registry):
        return app
    importlib.import_module(app)  # its @task decorators fill the default registry
    return default_registry


def _check(kinds: Iterable[str] | None, max_tasks: int, registry: Registry) -> None:
    if isinstance(max_tasks, bool) or not isinstance(max_tasks, int) or max_tasks < 1:
        raise ValueError(f"max_tasks must be a positive int, got {max_tasks!r}")
    missing = sorted(set(kinds or ()) - set(registry.kinds()))
    if missing:
        raise NoHandlerError(
            f"no handler is registered for {', '.join(map(repr, missing))}: import the "
            "module that registers it, or pass app=",
            dict.fromkeys(missing, 0),
            DrainResult(),
        )


async def _drain(
    target: Target,
    registry: Registry,
    options: dict[str, Any],
    unseen: list[int],
    *,
    reuse: bool,
) -> DrainResult:
    ledger_engine, dispose_ledger = target.open_async(reuse=reuse)
    sync_engine, dispose_sync = target.open_sync()
    handler_engine = target.async_engine if reuse and target.async_engine else ledger_engine
    ledger = own_ledger_on(ledger_engine)
    pool = ThreadPoolExecutor(1, thread_name_prefix="ledgerq-drain")
    keeper = _Keeper(ledger, asyncio.get_running_loop())
    task_runner = TaskRunner(
        registry, WORKER, pool, sync_engine, handler_engine, on_context=keeper.attach
    )
    hung = getattr(task_runner, "hung", None)  # the worker's hard cap would end pytest
    if hung is not None:
        hung.on_hung = log.error
    try:
        if unseen:
            existing = helper_queries(target.mysql).existing
            seen = {int(r[0]) for r in await ledger._rows(existing, {"ids": unseen})}
            if set(unseen) - seen:
                raise UncommittedTasksError(
                    f"{len(set(unseen) - seen)} tasks were enqueued in the bind's open "
                    "transaction and not committed: a worker cannot see them, nor can "
                    "drain; commit first (drain runs tasks as a worker does)"
                )
        await ledger.register_ordering(registry.orderings())
        await ledger.register_children_done(registry.children_done())
        await ledger.register_defaults(registry.defaults())
        drainer = _Drain(
            ledger,
            task_runner,
            registry,
            None if options["kinds"] is None else frozenset(options["kinds"]),
            options["queues"],
            options["include_future"],
            target.mysql,
        )
        return await drainer.run(options["max_tasks"])
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if dispose_ledger:
            await ledger_engine.dispose()
        if dispose_sync:
            sync_engine.dispose()


class DrainOptions(TypedDict, total=False):
    """What :func:`drain` and :func:`adrain` take besides the bind (see :func:`drain`;
    the defaults: every kind and queue, the ``@task`` registry, 1000 tasks, only
    what is due now)."""

    kinds: Iterable[str] | None
    queues: Iterable[str] | None
    app: Registry | str | None
    max_tasks: int
    include_future: bool


def _prepare(options: DrainOptions, name: str) -> tuple[dict[str, Any], Registry]:
    """``options`` checked (``name``: the caller's): the statements' parameters and
    the handlers' registry."""
    unknown = sorted(set(options) - DrainOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"{name}() got an unexpected keyword argument {unknown[0]!r}")
    max_tasks = options.get("max_tasks", 1000)
    params = {
        **selection(options.get("queues"), options.get("kinds")),
        "max_tasks": max_tasks,
        "include_future": bool(options.get("include_future", False)),
    }
    registry = _registry(options.get("app"))
    _check(params["kinds"], max_tasks, registry)
    return params, registry


def drain(bind: object, **options: Unpack[DrainOptions]) -> DrainResult:
    """Run every due task (of ``kinds`` and ``queues``, when given; else all) in this
    process, through the worker's claim, handler runner and finish statement, until
    none is due; return how each attempt ended.

    ``bind``: anything :func:`~ledgerq.enqueue` takes, or an ``Engine``; the drain
    connects to the database it points at and sees what is committed
    (:class:`UncommittedTasksError` if the bind's open transaction holds tasks it
    has not committed). ``app``: the handlers, a :class:`~ledgerq.Registry` or a
    module to import (default: the ``@task`` registry). A task due at a kind with
    no handler is :class:`NoHandlerError`, nothing claimed. A retry or a delayed
    task that is not due yet is not run: move time with
    :func:`~ledgerq.testing.advance`, or pass ``include_future=True`` to jump to
    each next due time until nothing is waiting (a task that always fails then
    runs until it is dead). ``max_tasks`` bounds the attempts (a task that
    enqueues itself); ``result.limited`` says it was reached."""
    params, registry = _prepare(options, "drain")
    target = resolve(bind, "drain")
    unseen: list[int] = []
    if in_transaction(bind):
        # An async handle's transaction is read by adrain only.
        with contextlib.suppress(TypeError):
            unseen = _ids(runner(bind, "drain")(_newest(bind), {}))
    return run_sync(_drain(target, registry, params, unseen, reuse=False), "drain")


async def adrain(bind: object, **options: Unpack[DrainOptions]) -> DrainResult:
    """:func:`drain` from async code (an ``AsyncEngine``'s or ``AsyncSession``'s test);
    async handlers' ``ctx.session`` opens on the bind's ``AsyncEngine``."""
    params, registry = _prepare(options, "adrain")
    target = resolve(bind, "adrain")
    unseen = await _aunseen(bind) if in_transaction(bind) else []
    return await _drain(target, registry, params, unseen, reuse=True)


def _ids(rows: Iterable[Any]) -> list[int]:
    return [int(r[0]) for r in rows]


async def _aunseen(bind: object) -> list[int]:
    """The newest pending ids as the bind's open transaction sees them."""
    try:
        arun = async_runner(bind, "adrain")
    except TypeError:  # a sync handle, read as drain() reads it
        try:
            run = runner(bind, "adrain")
        except TypeError:
            return []
        return _ids(run(_newest(bind), {}))
    return _ids(await arun(_newest(bind), {}))


def _newest(bind: object) -> Any:
    queries: HelperQueries = helper_queries(on_mysql(bind))
    return queries.newest_pending
