"""What the worker's parts hand each other, in the order a delivery travels.

``Intake`` turns a delivery into an :class:`Arrival`; the ``Claimer`` turns the
arrivals it wins into :class:`Claimed` and starts them on the ``Dispatcher``;
every claimed task leaves the dispatcher as one :class:`Ended`, which the
``Finisher`` writes (if the handler's transaction has not already) and then acks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerq.ledger.model import ClaimedTask, Fence, Outcome
from ledgerq.relay.broker.base import Delivery


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


#: How an attempt ended: already committed, or an outcome the finisher writes.
Result = Committed | Outcome


@dataclass(frozen=True, slots=True)
class Ended:
    task: ClaimedTask
    result: Result
    #: None: acked at the claim (lease mode), nothing to settle.
    delivery: Delivery | None
