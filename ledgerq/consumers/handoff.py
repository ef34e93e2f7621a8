"""What the worker's parts hand each other, in the order a delivery travels.

``Intake`` turns a delivery into an :class:`Arrival`; the ``Claimer`` turns the
arrivals it wins into :class:`Claimed` and starts them on the ``Dispatcher``;
every claimed task leaves the dispatcher as one :class:`Ended`, which the
``Finisher`` writes (if the handler's transaction has not already, and unless
its handler still runs at shutdown: :class:`StillRunning`) and then acks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerq.broker.base import Delivery
from ledgerq.ledger.model import ClaimedTask, Fence, Outcome


@dataclass(frozen=True, slots=True)
class Arrival:
    """A delivery whose body named a task: ``fence`` is (id, epoch it was published under)."""

    fence: Fence
    delivery: Delivery
    #: The message asks for the task to run alone on this worker (a suspect).
    alone: bool = False


@dataclass(frozen=True, slots=True)
class Claimed:
    """A delivery whose claim won: the row is ``running`` under ``task.epoch``.
    ``delivery`` is None when it was acked at the claim already (lease mode)."""

    task: ClaimedTask
    delivery: Delivery | None


@dataclass(frozen=True, slots=True)
class Committed:
    """The handler's writes and ``succeeded`` were committed in its own transaction
    (``won``), or its fence was lost and both were rolled back. Nothing is left to
    write."""

    won: bool


@dataclass(frozen=True, slots=True)
class StillRunning:
    """The worker stops (the grace is over) while the attempt's handler still runs
    in a thread it cannot stop: no outcome is written, so no retry can start
    while that code runs. The finisher acks the delivery and leaves the lease to
    lapse once the process has exited; the reconciler then retries the task
    (:mod:`.hung`)."""


#: How an attempt ended: already committed, an outcome the finisher writes, or
#: not ended yet when the worker stopped.
Result = Committed | Outcome | StillRunning


@dataclass(frozen=True, slots=True)
class Ended:
    task: ClaimedTask
    result: Result
    #: None: acked at the claim (lease mode), nothing to settle.
    delivery: Delivery | None
