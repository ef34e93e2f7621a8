"""The values that cross the storage seam, in both directions.

Each is a frozen, slotted dataclass: the relay, the worker and the reconciler
hand them to :class:`~ledgerq.ledger.protocol.Ledger` and get them back, and
never see a row object of the database driver.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any, Literal

from ledgerq.ledger.retry import RetryPolicy

#: An (id, epoch) pair: the fence every write after a claim carries.
Fence = tuple[int, int]

#: What the finish statement does with a running row: ``succeeded``, ``cancelled``
#: and ``dead`` end it (moving it to history); ``retry`` sends it back to
#: ``pending`` after ``delay`` seconds, or ends it ``dead`` when its attempts are
#: spent (``cancelled`` when an operator asked it to stop); ``release`` sends it
#: back to ``pending`` at once without charging the attempt and flags it
#: ``suspect`` (its worker died with other tasks in flight; ``cancelled`` too if
#: an operator asked it to stop).
Verdict = Literal["succeeded", "retry", "dead", "cancelled", "release"]


@dataclass(frozen=True, slots=True)
class DueTask:
    """A row the relay or reconciler holds locked while it publishes it."""

    id: int
    kind: str
    queue: str
    priority: int
    epoch: int
    #: A suspect (see :class:`ExpiredLease`): its message asks to be run alone.
    suspect: bool = False
    #: The producer's trace context (W3C carrier), when it enqueued inside a span.
    trace_context: dict[str, str] | None = None
    #: The route of the live subscription the task goes to (a worker's ``--kinds``
    #: and ``--shards``: :mod:`ledgerq.ledger.routing`); None: the queue's own.
    route: str | None = None
    #: How many live workers share that route (envelopes are cut per worker).
    subscribers: int = 1


@dataclass(frozen=True, slots=True)
class ClaimedTask:
    """A row a consumer won: status ``running`` under ``epoch``."""

    id: int
    epoch: int
    kind: str
    queue: str
    payload: Any
    attempts: int
    max_attempts: int
    retry: dict[str, Any] | None
    timeout_s: float | None
    checkpoint: Any
    business_key: str | None
    parent_id: int | None
    #: Set, to the payload's size in bytes, when the claim refused to load a payload
    #: larger than the workers' limit; ``payload`` is then None and the task must
    #: end dead without running.
    oversize_payload_bytes: int | None = None
    #: Seconds from when the task became due to this claim (database clock), if known:
    #: a measurement, not part of the task's identity (left out of ``==``).
    waited_s: float | None = field(default=None, compare=False)
    #: The producer's trace context (W3C carrier), when it enqueued inside a span.
    trace_context: dict[str, str] | None = None

    @property
    def fence(self) -> Fence:
        return (self.id, self.epoch)

    def retry_delay(self) -> float:
        return RetryPolicy.from_json(self.retry).delay_for(self.attempts)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How one attempt ended, as the finish statement takes it (one per row)."""

    id: int
    epoch: int
    verdict: Verdict
    error: str | None = None
    delay: float = 0.0
    #: The handler's return value as JSON text (None: it returned None).
    result: str | None = None

    @property
    def fence(self) -> Fence:
        return (self.id, self.epoch)

    @classmethod
    def succeeded(cls, fence: Fence, result: str | None = None) -> Outcome:
        return cls(fence[0], fence[1], "succeeded", result=result)

    @classmethod
    def cancelled(cls, fence: Fence, error: str) -> Outcome:
        """The handler stopped (or finished) after an operator's cancel request."""
        return cls(fence[0], fence[1], "cancelled", error)

    @classmethod
    def failed(
        cls, fence: Fence, error: str, *, delay: float = 0.0, final: bool = False
    ) -> Outcome:
        """A failed attempt: retried after ``delay`` seconds, or ``dead`` if ``final``."""
        return cls(fence[0], fence[1], "dead" if final else "retry", error, delay)


class Held(frozenset[int]):
    """The ids whose lease a heartbeat extended; ``cancelling`` those of them an
    operator asked to stop (``cancel_requested_at`` is set); ``busy`` the ids it
    did not extend because another transaction held the row (the worker's own
    batched window, say) while the fence still held: not lost, beaten again soon."""

    cancelling: frozenset[int]
    busy: frozenset[int]

    def __new__(
        cls, held: Iterable[int] = (), cancelling: Iterable[int] = (), busy: Iterable[int] = ()
    ) -> Held:
        self = super().__new__(cls, held)
        self.cancelling = frozenset(cancelling) & self
        self.busy = frozenset(busy) - self
        return self


@dataclass(frozen=True, slots=True)
class Finished:
    """A row the finish statement moved: ``status`` is where it went (``succeeded``,
    ``dead``, or ``pending`` for a scheduled retry)."""

    id: int
    kind: str
    attempts: int
    status: str
    last_error: str | None


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    """A running row whose worker stopped heartbeating.

    ``in_flight`` is how many running rows that worker left behind. Alone, the
    task is the one that was running when its worker died: the attempt is
    charged (retried after its backoff, or dead once spent). With others, any of
    them may have killed the worker: each is released uncharged, as a suspect,
    and a worker runs a suspect alone, so the next death is charged to the
    culprit only.
    """

    id: int
    epoch: int
    kind: str
    attempts: int
    retry: dict[str, Any] | None
    worker: str | None
    in_flight: int = 1
    #: Taken before its lease ran out: its worker is presumed dead (its liveness
    #: beats stopped while other workers' went on, migration 0017).
    orphaned: bool = False

    def outcome(self) -> Outcome:
        fence = (self.id, self.epoch)
        why = (
            f"worker {self.worker} presumed dead (its liveness beats stopped)"
            if self.orphaned
            else f"lease expired: worker {self.worker} stopped heartbeating"
        )
        if self.in_flight > 1:
            error = (
                f"{why} with {self.in_flight} tasks in flight; attempt {self.attempts} "
                "not charged, the task runs alone next"
            )
            return Outcome(fence[0], fence[1], "release", error)
        error = f"{why} (attempt {self.attempts})"
        delay = RetryPolicy.from_json(self.retry).delay_for(self.attempts)
        return Outcome.failed(fence, error, delay=delay)


@dataclass(frozen=True, slots=True)
class RescueAudit:
    """The audit record (actor ``ledgerq``) of a dead worker's rows the rescuer
    finished before their leases ran out, written in the rescue's transaction: the
    same on every ledger (:func:`rescue_audit`)."""

    selection: dict[str, Any]
    task_ids: list[int]
    action: str = "rescue_dead_worker"
    reason: str = (
        "its worker was presumed dead (its liveness beats stopped while other "
        "workers' went on) before the lease ran out"
    )


def rescue_audit(rows: Iterable[ExpiredLease], finished: Iterable[Finished]) -> RescueAudit | None:
    """What to audit of a rescued page: the ``finished`` rows of ``rows`` that were
    taken from a dead worker (``orphaned``); None when there are none (an expired
    lease is not audited)."""
    orphaned = {r.id: r.worker for r in rows if r.orphaned}
    moved = [f.id for f in finished if f.id in orphaned]
    if not moved:
        return None
    workers = sorted({str(orphaned[i]) for i in moved})
    return RescueAudit({"worker": workers}, moved)


@dataclass(frozen=True, slots=True)
class TaskTiming:
    """When a finished task passed each hop, in seconds since the epoch."""

    id: int
    created: float
    published: float | None
    started: float | None
    finished: float | None


@dataclass(frozen=True, slots=True)
class HistoryDay:
    """One day partition of history: the tasks of ``status`` that finished on ``day``
    (UTC)."""

    status: str
    day: date


@dataclass(frozen=True, slots=True)
class RollupStep:
    """One step of the dashboard's rollup: ``tasks`` finished tasks counted into
    ``rows`` rollup rows, the mark now at ``rolled_upto``; ``caught_up`` if it is
    as far as it may go (``settle_s`` before now)."""

    tasks: int
    rows: int
    rolled_upto: datetime | None
    caught_up: bool


@dataclass(frozen=True, slots=True)
class KindDefaults:
    """A kind's defaults for what a producer leaves unset (``@task(max_attempts=...,
    retry=..., timeout=...)``), written to the ledger at a worker's start and read by
    the claim; None: no default of the kind's (the built-in one applies)."""

    max_attempts: int | None = None
    #: The retry policy's JSON form (:meth:`RetryPolicy.to_json`).
    retry: dict[str, Any] | None = None
    timeout_s: float | None = None
