"""The handler registry: ``@task("kind")`` registers a function under a kind.

A handler takes ``(payload, ctx)``. It may be a plain function (run in the
worker's thread pool, ``ctx.session`` is a ``Session``) or ``async def`` (run on
the event loop, ``ctx.session`` is an ``AsyncSession``). Options given here are
defaults the worker applies when running the handler.

Scheduling options (issue 14) are read by other processes, not by the handler's
run: ``rate_limit="20/s"`` (also ``/m``, ``/h``; ``burst`` the bucket size) is
written into the ledger (``ledgerq_kinds``) when a worker starts, and every
relay meters the kind by it; ``ordering="block"`` makes a dead task of the
kind hold its ordering key (the default, ``release``, lets the next run), also
written at worker start; ``every=SECONDS`` or ``cron="*/5 * * * *"`` makes
the kind periodic: each worker runs a
:class:`~ledgerq.consumers.periodic.PeriodicEnqueuer` that enqueues one task per
period on ``queue``; ``on_children_done="import.finish"`` is written there too:
when a task of the kind and every task it spawned (``ctx.spawn``, or
``enqueue(parent_id=...)``) are terminal, the ledger enqueues one task of that
kind with ``{"parent_id", "succeeded", "dead", "cancelled"}`` (see
docs/design.md, "Fan-out"); ``sticky_retry=SECONDS`` is written there too: a
retry of the kind goes to the worker that ran the failed attempt while that
worker is live, until SECONDS after the retry is due, then to any worker
(docs/design.md, "Sticky retries").

Per-kind defaults (issue 26): ``max_attempts``, ``retry`` and ``timeout`` are
written into ``ledgerq_kinds`` at every worker's start too (:meth:`Registry.defaults`),
and the claim fills what a producer left unset from them, so they apply to a task
enqueued by kind name from a process that never imported the handler.
``queue``, ``priority``, ``expires``, ``unique`` and ``once`` are the producer's:
the :class:`~ledgerq.consumers.handles.TaskHandle` that ``@task`` returns passes them
to every ``handle.enqueue(...)``, and each is overridable there.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, ParamSpec, TypeVar

from ledgerq.consumers.handles import TaskHandle, kind_options
from ledgerq.consumers.periodic import Schedule
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.scheduling import RateLimit
from ledgerq.ledger.specs import RetryLike
from ledgerq.ledger.validation import check_name

P = ParamSpec("P")
R = TypeVar("R")
#: ``@task(ordering=...)``: what a dead task does to its ordering key.
ORDERINGS = ("release", "block")


class RegistryError(ValueError):
    """A handler could not be registered (bad kind, signature, or a duplicate)."""


@dataclass(frozen=True)
class Handler:
    kind: str
    fn: Callable[..., Any]
    is_async: bool
    #: Seconds a single attempt may run before it counts as failed (None: the
    #: task's own ``timeout``, else the worker's default).
    timeout_s: float | None = None
    #: Run back to back with other tasks of group-commit kinds in one transaction
    #: (see consumers.group): for short handlers that only write to the database.
    group_commit: bool = False
    #: Tasks of this kind published per second at most, across every relay.
    rate_limit: RateLimit | None = None
    #: When the kind is periodic: its schedule.
    schedule: Schedule | None = None
    #: What a dead task of this kind does to its ordering key: ``release`` lets the
    #: key's later tasks run, ``block`` holds them until an operator acts.
    ordering: str = "release"
    #: Lease mode for long tasks: the delivery is acked as soon as the claim commits,
    #: and from then on only the ledger's lease (renewed by heartbeats) holds the task.
    lease: bool = False
    #: The kind of the task enqueued once a task of this kind and all its children
    #: are terminal (fan-out with completion).
    on_children_done: str | None = None
    #: Seconds an attempt may run at most however often it checkpoints (the
    #: timeout alone runs from the last checkpoint; consumers.deadline.Deadline).
    max_runtime: float | None = None
    #: Seconds a retry is held for the worker that ran the failed attempt, counted
    #: from when the retry is due (None: any worker takes it).
    sticky_retry_s: float | None = None
    #: What the claim fills in when a producer left it unset (written at worker start).
    defaults: KindDefaults = field(default_factory=KindDefaults)
    #: The options ``handle.enqueue`` passes unless overridden (queue, priority, ...).
    enqueue_options: Mapping[str, Any] = field(default_factory=dict)


#: The longest ``sticky_retry`` (a day): a hold is a preference, not a schedule.
MAX_STICKY_RETRY_S = 86_400.0


class Registry:
    def __init__(self) -> None:
        self._handlers: dict[str, Handler] = {}

    def task(
        self,
        kind: str,
        *,
        timeout: float | None = None,
        group_commit: bool = False,
        rate_limit: str | None = None,
        burst: float | None = None,
        every: float | None = None,
        cron: str | None = None,
        queue: str = "default",
        ordering: str = "release",
        lease: bool = False,
        on_children_done: str | None = None,
        max_runtime: float | None = None,
        sticky_retry: float | None = None,
        priority: int | None = None,
        max_attempts: int | None = None,
        retry: RetryLike = None,
        expires: float | timedelta | None = None,
        unique: bool = False,
        once: bool = False,
    ) -> Callable[[Callable[P, R]], TaskHandle[P, R]]:
        """Decorator: register ``fn`` as the handler of ``kind``; returns its
        :class:`~ledgerq.consumers.handles.TaskHandle` (callable as ``fn``, and
        ``.enqueue(executor, payload, **options)`` with the kind's defaults)."""
        try:
            check_name(kind, "kind")
            options, defaults = kind_options(
                kind,
                queue=queue,
                priority=priority,
                max_attempts=max_attempts,
                retry=retry,
                timeout=timeout,
                expires=expires,
                unique=unique,
                once=once,
            )
            if on_children_done is not None:
                check_name(on_children_done, "on_children_done")
            limit = None if rate_limit is None else RateLimit.parse(rate_limit, burst)
            schedule = (
                None
                if every is None and cron is None
                else Schedule(kind, every, cron, check_name(queue, "queue"))
            )
        except ValueError as exc:  # InvalidTaskError and ScheduleError are ValueErrors
            raise RegistryError(str(exc)) from exc
        _check_options(kind, timeout, max_runtime, burst, limit, ordering, lease, group_commit)
        sticky = _sticky_seconds(kind, sticky_retry)

        def register(fn: Callable[P, R]) -> TaskHandle[P, R]:
            if isinstance(fn, TaskHandle):  # stacked @task: register the function itself
                fn = fn.fn
            params = [
                p
                for p in inspect.signature(fn).parameters.values()
                if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
            ]
            if len(params) != 2:
                raise RegistryError(
                    f"handler {fn.__qualname__} for {kind!r} must take (payload, ctx)"
                )
            existing = self._handlers.get(kind)
            if existing is not None and existing.fn is not fn:
                raise RegistryError(
                    f"kind {kind!r} already has a handler: {existing.fn.__qualname__}"
                )
            is_async = inspect.iscoroutinefunction(fn)
            if group_commit and not is_async:
                raise RegistryError(f"group_commit needs an async handler ({fn.__qualname__})")
            self._handlers[kind] = Handler(
                kind,
                fn,
                is_async,
                timeout,
                group_commit,
                limit,
                schedule,
                ordering,
                lease,
                on_children_done,
                max_runtime,
                sticky,
                defaults,
                options,
            )
            return TaskHandle(fn, kind, options)

        return register

    def get(self, kind: str) -> Handler | None:
        return self._handlers.get(kind)

    def kinds(self) -> list[str]:
        return sorted(self._handlers)

    def rate_limits(self) -> dict[str, RateLimit]:
        """The kinds with a rate limit, and theirs (written to the ledger at worker start)."""
        return {h.kind: h.rate_limit for h in self._handlers.values() if h.rate_limit}

    def orderings(self) -> dict[str, str]:
        """Every kind and what its dead tasks do to their ordering keys."""
        return {h.kind: h.ordering for h in self._handlers.values()}

    def children_done(self) -> dict[str, str | None]:
        """Every kind and the callback kind its families enqueue (None: none)."""
        return {h.kind: h.on_children_done for h in self._handlers.values()}

    def sticky_retries(self) -> dict[str, float | None]:
        """Every kind and how long its retries are held for the failing worker (None: not)."""
        return {h.kind: h.sticky_retry_s for h in self._handlers.values()}

    def defaults(self) -> dict[str, KindDefaults]:
        """Every kind and its defaults for unset max_attempts, retry and timeout."""
        return {h.kind: h.defaults for h in self._handlers.values()}

    def schedules(self) -> list[Schedule]:
        """The periodic kinds' schedules."""
        return [h.schedule for h in self._handlers.values() if h.schedule is not None]

    def __iter__(self) -> Iterator[Handler]:
        return iter(self._handlers.values())

    def __len__(self) -> int:
        return len(self._handlers)


def _check_options(
    kind: str,
    timeout: float | None,
    max_runtime: float | None,
    burst: float | None,
    limit: RateLimit | None,
    ordering: str,
    lease: bool,
    group_commit: bool,
) -> None:
    """RegistryError for options that are each valid but wrong (or wrong together)."""
    for name, seconds in (("timeout", timeout), ("max_runtime", max_runtime)):
        if seconds is not None and seconds <= 0:
            raise RegistryError(f"{name} must be positive, got {seconds!r}")
    if burst is not None and limit is None:
        raise RegistryError(f"burst needs a rate_limit ({kind!r})")
    if ordering not in ORDERINGS:
        raise RegistryError(f"ordering must be 'release' or 'block', got {ordering!r}")
    if lease and group_commit:
        raise RegistryError(
            f"{kind!r}: lease=True is for long tasks, group_commit=True for short ones"
        )


def _sticky_seconds(kind: str, value: object) -> float | None:
    """``sticky_retry`` as seconds, or RegistryError naming it."""
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= MAX_STICKY_RETRY_S
    ):
        raise RegistryError(
            f"sticky_retry ({kind!r}) must be a number of seconds above 0 and at most "
            f"{MAX_STICKY_RETRY_S:g}, got {value!r}"
        )
    return float(value)


#: The default registry that ``from ledgerq import task`` writes to.
default_registry = Registry()
task = default_registry.task
