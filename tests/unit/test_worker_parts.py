"""Each part of the worker on its own, with hand-written stand-ins for its neighbours.

No database and no broker: a stub ledger implements only the protocol methods the
part under test is expected to call (every other one fails the test if called),
answers with canned values and records its calls; fake deliveries record every
ack and reject they are asked to send, on a fake channel that settles tags the way
RabbitMQ does. One shared timeline orders the ledger's writes, the probe's points
and the acks, so "acked only after the commit" is something a test can check.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.broker.topology import message_body
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.batch import BatchConfig, Batcher
from ledgerq.consumers.claimer import Claimer, Slots
from ledgerq.consumers.context import AsyncTaskContext, TaskContext
from ledgerq.consumers.dispatcher import SHUTDOWN, Dispatcher
from ledgerq.consumers.execute import Abort, TaskRunner
from ledgerq.consumers.finisher import Finisher
from ledgerq.consumers.group import GroupCommitter
from ledgerq.consumers.handoff import Arrival, Claimed, Committed, Ended
from ledgerq.consumers.intake import Intake, TaskMessage, decode_message
from ledgerq.consumers.leases import Leases
from ledgerq.consumers.registry import Handler, Registry
from ledgerq.core.errors import StorageError, TransientStorageError
from ledgerq.hooks.probes import Point
from ledgerq.ledger.model import ClaimedTask, Fence, Finished, Held, Outcome

# -- the broker's side: a channel that settles tags, deliveries that record ----------


class Timeline(list[str]):
    """What happened, in order: ledger calls, probe points, acks and rejects."""


class FakeChannel:
    """Settles tags as RabbitMQ does: a ``multiple`` ack settles every outstanding
    tag up to the one named, and naming a tag that is already settled is an error
    (the broker would close the channel)."""

    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.outstanding: list[int] = []
        self.settled: dict[int, str] = {}  # tag -> "acked" | "requeued" | "dead-lettered"

    def deliver(self, body: bytes) -> FakeDelivery:
        tag = len(self.outstanding) + len(self.settled) + 1
        self.outstanding.append(tag)
        return FakeDelivery(self, tag, body)

    def settle(self, tag: int, how: str, multiple: bool = False) -> None:
        assert tag in self.outstanding, f"tag {tag} is not outstanding (channel would close)"
        tags = [t for t in self.outstanding if t <= tag] if multiple else [tag]
        for t in tags:
            self.outstanding.remove(t)
            self.settled[t] = how
            self.timeline.append(f"{how} {t}")


class FakeDelivery:
    """One delivery: the attributes of the Delivery protocol, and a record of what
    the worker asked the broker to do with it."""

    def __init__(self, channel: FakeChannel, tag: int, body: bytes) -> None:
        self.channel = channel
        self.delivery_tag = tag
        self.message_id: str | None = f"msg-{tag}"
        self.body = body
        self.acks: list[bool] = []  # the ``multiple`` flag of each ack sent for this tag
        self.rejects: list[bool] = []  # the ``requeue`` flag of each reject

    async def ack(self, multiple: bool = False) -> None:
        await asyncio.sleep(0)  # a real ack yields to the loop too
        self.acks.append(multiple)
        self.channel.settle(self.delivery_tag, "acked", multiple)

    async def reject(self, requeue: bool) -> None:
        await asyncio.sleep(0)
        self.rejects.append(requeue)
        self.channel.settle(self.delivery_tag, "requeued" if requeue else "dead-lettered")


def body(task_id: int, epoch: int) -> bytes:
    return json.dumps({"id": task_id, "epoch": epoch}).encode()


def arrive(acker: Acker, channel: FakeChannel, fence: Fence) -> tuple[Arrival, FakeDelivery]:
    """A delivery naming ``fence``, received by the acker as Intake would have done."""
    delivery = channel.deliver(body(*fence))
    acker.received(delivery)
    return Arrival(fence, delivery), delivery


def claimed_task(
    task_id: int, epoch: int, kind: str = "parts.ok", *, attempts: int = 1, max_attempts: int = 5
) -> ClaimedTask:
    return ClaimedTask(
        task_id,
        epoch,
        kind,
        "default",
        {"n": task_id},
        attempts,
        max_attempts,
        {"kind": "fixed", "delay": 7.0},
        None,
        None,
        None,
        None,
    )


# -- the ledger's side: stubs of the narrow protocols --------------------------------


class UnusedWorkerLedger:
    """The WorkerLedger protocol with every method failing the test: a stub for one
    part overrides only the methods that part is expected to call."""

    def __init__(self, timeline: Timeline | None = None) -> None:
        self.timeline = timeline if timeline is not None else Timeline()

    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        raise AssertionError("claim was not expected here")

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        raise AssertionError("whereabouts was not expected here")

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        raise AssertionError("finish was not expected here")

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        raise AssertionError("heartbeat was not expected here")

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        raise AssertionError("save_checkpoint was not expected here")


class ClaimLedger(UnusedWorkerLedger):
    """claim answers with a canned list of won rows (or raises); whereabouts with a
    canned map."""

    def __init__(
        self,
        won: list[ClaimedTask] | None = None,
        where: dict[int, str] | None = None,
        error: Exception | None = None,
    ) -> None:
        super().__init__()
        self.won = won or []
        self.where = where or {}
        self.error = error
        self.claims: list[tuple[list[Fence], str, float]] = []
        self.asked_where: list[list[int]] = []

    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        self.claims.append((list(fences), worker, lease_s))
        if self.error is not None:
            raise self.error
        return self.won

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        self.asked_where.append(list(ids))
        return self.where


class FinishLedger:
    """The FinishingLedger protocol: each call takes the next canned answer (a list of
    Finished rows, or an exception to raise), and may wait on a gate first."""

    def __init__(
        self,
        timeline: Timeline,
        answers: list[list[Finished] | Exception],
        gate: asyncio.Event | None = None,
    ) -> None:
        self.timeline = timeline
        self.answers = answers
        self.gate = gate
        self.calls: list[list[Outcome]] = []
        self.entered = asyncio.Event()

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        self.calls.append(list(outcomes))
        self.timeline.append("finish called")
        self.entered.set()
        if self.gate is not None:
            await self.gate.wait()
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            self.timeline.append("finish raised")
            raise answer
        self.timeline.append("finish returned")
        return answer


class HeartbeatLedger(UnusedWorkerLedger):
    """heartbeat answers with the canned set of ids still held (and, of those, the
    ones an operator asked to stop)."""

    def __init__(self, held: set[int], cancelling: set[int] | None = None) -> None:
        super().__init__()
        self.held = Held(held, cancelling or ())
        self.beats: list[tuple[list[Fence], float]] = []

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        self.beats.append((sorted(fences), lease_s))
        return self.held


class Probes:
    def __init__(self, timeline: Timeline) -> None:
        self.timeline = timeline
        self.points: list[str] = []

    def __call__(self, point: Point) -> None:
        self.points.append(point)
        self.timeline.append(f"probe {point}")


@pytest.fixture
def timeline() -> Timeline:
    return Timeline()


@pytest.fixture
def channel(timeline: Timeline) -> FakeChannel:
    return FakeChannel(timeline)


@pytest.fixture
def backoffs(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The parts back off with ``asyncio.sleep(1.0)``: record the waits asked for and
    do not wait, so the tests run in milliseconds."""
    asked: list[float] = []
    real_sleep = asyncio.sleep

    async def no_wait(delay: float, result: Any = None) -> Any:
        if delay > 0:  # a plain yield to the loop (sleep(0)) is no back-off
            asked.append(delay)
        return await real_sleep(0, result)

    monkeypatch.setattr(asyncio, "sleep", no_wait)
    return asked


# -- Intake ---------------------------------------------------------------------------


async def test_intake_sends_a_body_that_names_no_task_to_the_dead_letter_queue(
    channel: FakeChannel,
) -> None:
    acker, arrivals = Acker(), list[Arrival]()
    intake = Intake(acker, arrivals.append)
    malformed = [b"not json", b'{"id": "5", "epoch": 0}', b'{"id": 5}', b'{"id": 0, "epoch": 1}']
    deliveries = [channel.deliver(b) for b in malformed]

    for delivery in deliveries:
        await intake(delivery)

    assert arrivals == []
    assert [d.rejects for d in deliveries] == [[False]] * 4  # rejected, requeue=False
    assert [d.acks for d in deliveries] == [[]] * 4
    assert channel.settled == {
        1: "dead-lettered",
        2: "dead-lettered",
        3: "dead-lettered",
        4: "dead-lettered",
    }
    assert (intake.received, intake.rejected) == (4, 4)


async def test_intake_passes_a_good_body_on_as_an_arrival_with_its_fence(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker, arrivals = Acker(), list[Arrival]()
    probe = Probes(timeline)
    intake = Intake(acker, arrivals.append, probe)
    delivery = channel.deliver(b'{"id": 42, "epoch": 3, "extra": "ignored"}')

    await intake(delivery)

    assert arrivals == [Arrival((42, 3), delivery)]
    assert arrivals[0].delivery is delivery
    assert delivery.acks == [] and delivery.rejects == []  # settled later, after the commit
    assert channel.outstanding == [1]
    assert probe.points == ["worker.after_receive"]
    assert (intake.received, intake.rejected) == (1, 0)


async def test_intake_registers_deliveries_with_the_acker_so_a_later_ack_can_coalesce(
    channel: FakeChannel,
) -> None:
    acker, arrivals = Acker(), list[Arrival]()
    intake = Intake(acker, arrivals.append)
    first, second = channel.deliver(body(1, 0)), channel.deliver(body(2, 0))
    await intake(first)
    await intake(second)

    await acker.finished([a.delivery for a in reversed(arrivals)])

    # Both were registered in order, so one multiple ack for tag 2 settles both.
    assert (first.acks, second.acks) == ([], [True])
    assert channel.settled == {1: "acked", 2: "acked"}


# -- Claimer --------------------------------------------------------------------------


def claimer_for(
    ledger: UnusedWorkerLedger, acker: Acker, slots: Slots, started: list[list[Claimed]]
) -> Claimer:
    return Claimer(
        ledger, acker, slots, started.append, worker_id="w-1", lease_s=30.0, max_batch=100
    )


async def test_claimer_claims_only_as_many_deliveries_as_there_are_free_slots(
    channel: FakeChannel,
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(2), list[list[Claimed]]()
    ledger = ClaimLedger(won=[claimed_task(1, 1), claimed_task(2, 1)])
    claimer = claimer_for(ledger, acker, slots, started)
    arrivals = [arrive(acker, channel, (n, 0))[0] for n in (1, 2, 3)]
    for arrival in arrivals:
        claimer.offer(arrival)

    taken = await claimer.claim_once()

    assert taken == 2
    assert ledger.claims == [([(1, 0), (2, 0)], "w-1", 30.0)]
    assert list(claimer.inbox) == [arrivals[2]]  # the third waits, unclaimed
    assert slots.free == 0  # both slots are held by the started tasks
    assert [[c.task.id for c in batch] for batch in started] == [[1, 2]]
    assert await claimer.claim_once() == 0  # no free slot: no claim at all
    assert len(ledger.claims) == 1


async def test_claimer_runs_a_suspect_alone_once_every_slot_is_free(
    channel: FakeChannel,
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(4), list[list[Claimed]]()
    ledger = ClaimLedger(won=[claimed_task(n, 1) for n in (1, 2, 3)])
    claimer = claimer_for(ledger, acker, slots, started)
    first, _ = arrive(acker, channel, (1, 0))
    suspect = Arrival((2, 0), channel.deliver(body(2, 0)), alone=True)
    acker.received(suspect.delivery)
    third, _ = arrive(acker, channel, (3, 0))
    slots.take(1)  # a handler from before is still running
    for arrival in (first, suspect, third):
        claimer.offer(arrival)

    # A suspect waits: nothing new is claimed beside the handler still running.
    assert await claimer.claim_once() == 0
    assert ledger.claims == []
    slots.give()
    assert await claimer.claim_once() == 1
    assert ledger.claims == [([(2, 0)], "w-1", 30.0)]
    assert slots.alone and slots.free == 3
    # While it runs, nothing else is claimed, though three slots are free.
    assert await claimer.claim_once() == 0
    assert list(claimer.inbox) == [first, third]
    slots.give()  # the suspect's handler ended
    assert not slots.alone
    assert await claimer.claim_once() == 2
    assert ledger.claims[-1][0] == [(1, 0), (3, 0)]


def test_a_suspects_message_asks_to_run_alone_and_others_do_not() -> None:
    assert decode_message(message_body(5, 2, alone=True)) == TaskMessage(((5, 2),), alone=True)
    assert decode_message(message_body(5, 2)) == TaskMessage(((5, 2),), alone=False)
    assert decode_message(b'{"id": 5, "epoch": 2, "alone": "yes"}') == TaskMessage(((5, 2),))
    assert len(message_body(2**62, 2**62, alone=True)) < 80  # see intake.MAX_BODY_BYTES


async def test_claimer_matches_winners_by_id_and_previous_epoch_so_a_stale_duplicate_is_skipped(
    channel: FakeChannel,
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(10), list[list[Claimed]]()
    # The claim bumps the epoch: the delivery that won carried epoch 2, the row is now 3.
    ledger = ClaimLedger(won=[claimed_task(7, 3)], where={7: "running"})
    claimer = claimer_for(ledger, acker, slots, started)
    stale, stale_delivery = arrive(acker, channel, (7, 1))  # an older attempt's message
    current, current_delivery = arrive(acker, channel, (7, 2))
    claimer.offer(stale)
    claimer.offer(current)

    await claimer.claim_once()

    assert [[(c.task.fence, c.delivery) for c in batch] for batch in started] == [
        [((7, 3), current_delivery)]
    ]
    assert stale_delivery.acks != [] and stale_delivery.rejects == []
    assert channel.settled == {1: "acked"}  # the stale one acked as skipped ...
    assert current_delivery.acks == [] and current_delivery.rejects == []  # ... not the winner
    assert (claimer.claimed, claimer.skipped) == (1, 1)
    assert slots.free == 9  # the skipped delivery's slot came back at once


async def test_claimer_starts_a_task_once_when_the_same_fence_arrives_twice(
    channel: FakeChannel,
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(10), list[list[Claimed]]()
    ledger = ClaimLedger(won=[claimed_task(5, 1)], where={5: "running"})
    claimer = claimer_for(ledger, acker, slots, started)
    first, first_delivery = arrive(acker, channel, (5, 0))
    again, again_delivery = arrive(acker, channel, (5, 0))  # a redelivered copy
    claimer.offer(first)
    claimer.offer(again)

    await claimer.claim_once()

    assert [c.delivery for batch in started for c in batch] == [first_delivery]
    assert again_delivery.acks != [] and first_delivery.acks == []
    assert (claimer.claimed, claimer.skipped) == (1, 1)


async def test_claimer_acks_losers_and_gives_their_slots_back(
    channel: FakeChannel,
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(4), list[list[Claimed]]()
    ledger = ClaimLedger(won=[claimed_task(2, 1)], where={1: "succeeded"})  # 3 is unknown
    claimer = claimer_for(ledger, acker, slots, started)
    pairs = [arrive(acker, channel, (n, 0)) for n in (1, 2, 3)]
    for arrival, _ in pairs:
        claimer.offer(arrival)

    await claimer.claim_once()

    (_, d1), (_, d2), (_, d3) = pairs
    assert ledger.asked_where == [[1, 3]]
    assert [c.task.id for batch in started for c in batch] == [2]
    assert d1.acks and d3.acks and not d2.acks
    assert channel.settled == {1: "acked", 3: "acked"}
    assert d1.rejects == d3.rejects == []
    assert slots.free == 3  # one slot held by task 2, the losers' two came back
    assert (claimer.claimed, claimer.skipped) == (1, 2)


async def test_claimer_acks_losers_even_when_their_whereabouts_cannot_be_read(
    channel: FakeChannel,
) -> None:
    class NoWhereabouts(ClaimLedger):
        async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
            raise TransientStorageError("connection lost")

    acker, slots, started = Acker(max_waiting=0), Slots(4), list[list[Claimed]]()
    claimer = claimer_for(NoWhereabouts(won=[]), acker, slots, started)
    arrival, delivery = arrive(acker, channel, (8, 0))
    claimer.offer(arrival)

    await claimer.claim_once()

    assert delivery.acks != [] and channel.settled == {1: "acked"}
    assert started == [] and slots.free == 4 and claimer.skipped == 1


async def test_a_claim_that_raises_gives_the_slots_back_and_requeues_the_deliveries(
    channel: FakeChannel, backoffs: list[float]
) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(3), list[list[Claimed]]()
    ledger = ClaimLedger(error=TransientStorageError("the database went away"))
    claimer = claimer_for(ledger, acker, slots, started)
    pairs = [arrive(acker, channel, (n, 0)) for n in (1, 2)]
    for arrival, _ in pairs:
        claimer.offer(arrival)

    taken = await claimer.claim_once()

    assert taken == 2 and len(ledger.claims) == 1
    assert started == []
    assert slots.free == 3
    assert [d.rejects for _, d in pairs] == [[True], [True]]  # requeue=True
    assert [d.acks for _, d in pairs] == [[], []]
    assert channel.settled == {1: "requeued", 2: "requeued"}
    assert (claimer.claimed, claimer.skipped) == (0, 0)
    assert 1.0 in backoffs  # it backs off before claiming again


async def test_the_claim_loop_claims_when_a_slot_is_given_back(channel: FakeChannel) -> None:
    acker, slots, started = Acker(max_waiting=0), Slots(1), list[list[Claimed]]()
    ledger = ClaimLedger(won=[claimed_task(1, 1)])
    claimer = claimer_for(ledger, acker, slots, started)
    claimer.start_loop()
    try:
        first, _ = arrive(acker, channel, (1, 0))
        second, _ = arrive(acker, channel, (2, 0))
        claimer.offer(first)
        claimer.offer(second)
        await asyncio.wait_for(_until(lambda: len(started) == 1), 30)
        assert list(claimer.inbox) == [second]  # no slot for it yet
        ledger.won = [claimed_task(2, 1)]
        slots.give()  # task 1's handler stopped
        await asyncio.wait_for(_until(lambda: len(started) == 2), 30)
    finally:
        await claimer.stop()
    assert [fences for fences, _, _ in ledger.claims] == [[(1, 0)], [(2, 0)]]


async def _until(condition: Callable[[], bool]) -> None:
    while not condition():
        await asyncio.sleep(0.001)


# -- Finisher -------------------------------------------------------------------------


def finisher_for(
    ledger: FinishLedger,
    acker: Acker,
    leases: Leases,
    probe: Probes,
    alert: Callable[[Finished], None] | None = None,
    grace_s: float = 30.0,
) -> Finisher:
    return Finisher(
        ledger,
        acker,
        leases,
        max_batch=100,
        grace_s=grace_s,
        alert=alert or (lambda row: None),
        probe=probe,
    )


def ended(
    acker: Acker, channel: FakeChannel, task: ClaimedTask, result: Committed | Outcome
) -> Ended:
    delivery = channel.deliver(body(task.id, task.epoch - 1))
    acker.received(delivery)
    return Ended(task, result, delivery)


def finished(task: ClaimedTask, status: str, error: str | None = None) -> Finished:
    return Finished(task.id, task.kind, task.attempts, status, error)


async def test_finisher_writes_only_outcomes_in_one_call_and_never_the_committed_ones(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    a, b, c, d = (claimed_task(n, 1) for n in (1, 2, 3, 4))
    succeeded, failed = Outcome.succeeded(b.fence), Outcome.failed(c.fence, "boom", delay=5)
    ledger = FinishLedger(timeline, [[finished(b, "succeeded"), finished(c, "pending", "boom")]])
    finisher = finisher_for(ledger, acker, leases, Probes(timeline))
    batch = [
        ended(acker, channel, a, Committed(True)),
        ended(acker, channel, b, succeeded),
        ended(acker, channel, c, failed),
        ended(acker, channel, d, Committed(False)),
    ]

    await finisher.finish_batch(batch)

    assert ledger.calls == [[succeeded, failed]]
    assert channel.settled == {1: "acked", 2: "acked", 3: "acked", 4: "acked"}


async def test_finisher_acks_only_after_the_finish_call_returned_with_the_probe_in_between(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker, gate = Acker(), asyncio.Event()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    task = claimed_task(1, 1)
    ledger = FinishLedger(timeline, [[finished(task, "succeeded")]], gate=gate)
    probe = Probes(timeline)
    finisher = finisher_for(ledger, acker, leases, probe)
    batch = [ended(acker, channel, task, Outcome.succeeded(task.fence))]

    running = asyncio.create_task(finisher.finish_batch(batch))
    await asyncio.wait_for(ledger.entered.wait(), 30)
    for _ in range(5):
        await asyncio.sleep(0)
    assert channel.settled == {} and probe.points == []  # the write has not returned: no ack

    gate.set()
    await asyncio.wait_for(running, 30)

    assert timeline == ["finish called", "finish returned", "probe worker.after_commit", "acked 1"]


async def test_finisher_acks_a_batch_of_committed_results_without_a_write(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    task = claimed_task(1, 1)
    leases.track(task)
    ledger = FinishLedger(timeline, [[]])
    finisher = finisher_for(ledger, acker, leases, Probes(timeline))

    await finisher.finish_batch([ended(acker, channel, task, Committed(True))])

    assert ledger.calls in ([], [[]])  # nothing to write (an empty call writes nothing)
    assert channel.settled == {1: "acked"}
    assert len(leases) == 0
    assert finisher.succeeded == 1


async def test_finisher_retries_a_transient_storage_error_then_succeeds(
    channel: FakeChannel, timeline: Timeline, backoffs: list[float]
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    task = claimed_task(1, 1)
    outcome = Outcome.succeeded(task.fence)
    ledger = FinishLedger(
        timeline,
        [
            TransientStorageError("connection reset"),
            TransientStorageError("still down"),
            [finished(task, "succeeded")],
        ],
    )
    finisher = finisher_for(ledger, acker, leases, Probes(timeline))
    delivery = ended(acker, channel, task, outcome)

    await finisher.finish_batch([delivery])

    assert ledger.calls == [[outcome], [outcome], [outcome]]
    assert backoffs == [1.0, 1.0]
    assert channel.settled == {1: "acked"}
    assert finisher.succeeded == 1
    assert timeline.index("finish returned") < timeline.index("acked 1")


async def test_a_transient_error_past_the_shutdown_grace_gives_the_batch_back(
    channel: FakeChannel, timeline: Timeline, backoffs: list[float]
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    task = claimed_task(1, 1)
    leases.track(task)
    ledger = FinishLedger(timeline, [TransientStorageError("down")])
    finisher = finisher_for(ledger, acker, leases, Probes(timeline), grace_s=0.0)
    finisher.stopping()
    time.sleep(0.002)  # the grace (zero) is over

    await finisher.finish_batch([ended(acker, channel, task, Outcome.succeeded(task.fence))])

    assert len(ledger.calls) == 1 and backoffs == []
    assert channel.settled == {1: "requeued"}
    assert len(leases) == 0


async def test_finisher_gives_a_batch_back_on_a_storage_error_that_is_not_transient(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    a, b = claimed_task(1, 1), claimed_task(2, 1)
    leases.track(a)
    leases.track(b)
    probe = Probes(timeline)
    ledger = FinishLedger(timeline, [StorageError("invalid input syntax")])
    finisher = finisher_for(ledger, acker, leases, probe)
    batch = [
        ended(acker, channel, a, Outcome.succeeded(a.fence)),
        ended(acker, channel, b, Committed(True)),
    ]

    await finisher.finish_batch(batch)

    assert len(ledger.calls) == 1  # not retried
    assert channel.settled == {1: "requeued", 2: "requeued"}
    assert [e.delivery for e in batch if cast(FakeDelivery, e.delivery).acks] == []
    assert len(leases) == 0  # no longer heartbeated: the leases lapse
    assert probe.points == []
    assert (finisher.succeeded, finisher.retried, finisher.dead) == (0, 0, 0)


async def test_finisher_counts_what_the_ledger_returned_and_alerts_for_the_dead(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    alerts: list[Finished] = []
    alerted_on = list[str]()

    def alert(row: Finished) -> None:
        alerts.append(row)
        alerted_on.append(threading.current_thread().name)

    ok, retried, spent, stale, committed, rolled_back = (
        claimed_task(n, 1, attempts=n) for n in (1, 2, 3, 4, 5, 6)
    )
    dead_row = finished(spent, "dead", "boom")
    ledger = FinishLedger(
        timeline,
        [[finished(ok, "succeeded"), finished(retried, "pending", "boom"), dead_row]],
    )
    finisher = finisher_for(ledger, acker, leases, Probes(timeline), alert=alert)
    batch = [
        ended(acker, channel, ok, Outcome.succeeded(ok.fence)),
        ended(acker, channel, retried, Outcome.failed(retried.fence, "boom", delay=1)),
        # A retry verdict, but its attempts were spent: the ledger says dead.
        ended(acker, channel, spent, Outcome.failed(spent.fence, "boom", delay=1)),
        # A fence lost to the reconciler: the ledger moved nothing, so nothing counts.
        ended(acker, channel, stale, Outcome.succeeded(stale.fence)),
        ended(acker, channel, committed, Committed(True)),
        ended(acker, channel, rolled_back, Committed(False)),
    ]

    await finisher.finish_batch(batch)
    await finisher.close()  # waits for the alerts raised in the background

    assert (finisher.succeeded, finisher.retried, finisher.dead) == (2, 1, 1)
    assert alerts == [dead_row]
    assert alerted_on != [threading.current_thread().name]  # not on the event loop's thread
    assert set(channel.settled.values()) == {"acked"} and len(channel.settled) == 6


async def test_a_slow_alert_holds_up_neither_the_ack_nor_the_next_batch(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker, release = Acker(), threading.Event()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    first, second = claimed_task(1, 1), claimed_task(2, 1)
    ledger = FinishLedger(
        timeline, [[finished(first, "dead", "boom")], [finished(second, "succeeded")]]
    )

    def slow_alert(row: Finished) -> None:
        release.wait(5)

    finisher = finisher_for(ledger, acker, leases, Probes(timeline), alert=slow_alert)
    try:
        await finisher.finish_batch(
            [ended(acker, channel, first, Outcome.failed(first.fence, "x", final=True))]
        )
        await finisher.finish_batch(
            [ended(acker, channel, second, Outcome.succeeded(second.fence))]
        )
        assert channel.settled == {1: "acked", 2: "acked"}  # while the alert still hangs
    finally:
        release.set()
        await finisher.close()
    assert finisher.dead == 1 and finisher.succeeded == 1


async def test_the_finisher_loop_writes_everything_put_before_close(
    channel: FakeChannel, timeline: Timeline
) -> None:
    acker = Acker()
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    tasks = [claimed_task(n, 1) for n in (1, 2, 3)]
    ledger = FinishLedger(timeline, [[finished(t, "succeeded") for t in tasks]] * 3)
    finisher = finisher_for(ledger, acker, leases, Probes(timeline))
    finisher.start()
    for task in tasks:
        finisher.put(ended(acker, channel, task, Outcome.succeeded(task.fence)))

    await asyncio.wait_for(finisher.close(), 30)

    written = [o.id for call in ledger.calls for o in call]
    assert sorted(written) == [1, 2, 3] and len(written) == 3
    assert channel.settled == {1: "acked", 2: "acked", 3: "acked"}


# -- Leases ---------------------------------------------------------------------------


async def test_leases_flag_lost_on_the_context_of_a_task_whose_fence_no_longer_holds() -> None:
    kept, rescued = claimed_task(1, 4), claimed_task(2, 6)
    ledger = HeartbeatLedger(held={1})
    leases = Leases(ledger, lease_s=45.0, heartbeat_s=15.0)
    kept_ctx, rescued_ctx = TaskContext(kept, "w-1"), AsyncTaskContext(rescued, "w-1")
    for task, ctx in ((kept, kept_ctx), (rescued, rescued_ctx)):
        leases.track(task)
        leases.attach(task, ctx)

    lost = await leases.beat_once()

    assert lost == 1
    assert ledger.beats == [([(1, 4), (2, 6)], 45.0)]
    assert rescued_ctx.lost is True
    assert kept_ctx.lost is False


async def test_leases_flag_cancel_requested_on_the_context_of_a_task_an_operator_cancels() -> None:
    asked, left = claimed_task(1, 4), claimed_task(2, 6)
    ledger = HeartbeatLedger(held={1, 2}, cancelling={1, 3})  # 3: not held, ignored
    leases = Leases(ledger, lease_s=45.0, heartbeat_s=15.0)
    asked_ctx, left_ctx = TaskContext(asked, "w-1"), AsyncTaskContext(left, "w-1")
    for task, ctx in ((asked, asked_ctx), (left, left_ctx)):
        leases.track(task)
        leases.attach(task, ctx)

    assert await leases.beat_once() == 0

    assert asked_ctx.cancel_requested is True and asked_ctx.lost is False
    assert left_ctx.cancel_requested is False
    assert ledger.held.cancelling == {1}


async def test_leases_count_a_lost_task_even_before_its_handler_has_a_context() -> None:
    ledger = HeartbeatLedger(held=set())
    leases = Leases(ledger, lease_s=45.0, heartbeat_s=15.0)
    leases.track(claimed_task(3, 1))

    assert await leases.beat_once() == 1


async def test_leases_forget_finished_tasks_and_stop_heartbeating_them() -> None:
    done, running = claimed_task(1, 1), claimed_task(2, 1)
    ledger = HeartbeatLedger(held={2})
    leases = Leases(ledger, lease_s=45.0, heartbeat_s=15.0)
    done_ctx = TaskContext(done, "w-1")
    leases.track(done)
    leases.attach(done, done_ctx)
    leases.track(running)

    leases.forget(done.fence)
    lost = await leases.beat_once()

    assert lost == 0
    assert ledger.beats == [([(2, 1)], 45.0)]
    assert done_ctx.lost is False  # finished, not lost
    assert len(leases) == 1

    leases.forget(running.fence)
    assert await leases.beat_once() == 0
    assert len(ledger.beats) == 1  # nothing held: no statement at all


async def test_leases_ignore_a_context_for_a_task_they_do_not_track() -> None:
    ledger = HeartbeatLedger(held=set())
    leases = Leases(ledger, lease_s=45.0, heartbeat_s=15.0)
    task = claimed_task(9, 1)
    leases.attach(task, TaskContext(task, "w-1"))  # finished before its context arrived

    assert len(leases) == 0
    assert await leases.beat_once() == 0 and ledger.beats == []


# -- Dispatcher -----------------------------------------------------------------------


class StubGroup(GroupCommitter):
    """The group committer, answering with a canned result (or raising)."""

    def __init__(self, answer: bool | BaseException) -> None:
        super().__init__(cast(AsyncEngine, None), "w-1")
        self.answer = answer
        self.batches: list[list[int]] = []

    async def run(self, batch: Sequence[tuple[ClaimedTask, Handler]]) -> bool:
        self.batches.append([task.id for task, _ in batch])
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(4)
    yield executor
    executor.shutdown(wait=True)


def dispatcher_for(
    registry: Registry,
    pool: ThreadPoolExecutor,
    slots: Slots,
    out: list[Ended],
    group: GroupCommitter | None = None,
) -> tuple[Dispatcher, Leases]:
    leases = Leases(UnusedWorkerLedger(), 60.0, 15.0)
    runner = TaskRunner(registry, "w-1", pool, None, None, on_context=leases.attach)
    batcher = Batcher(runner, BatchConfig(), None, None)  # no engines: nothing is batched
    dispatcher = Dispatcher(
        registry, runner, group or StubGroup(True), batcher, slots, leases, out.append
    )
    return dispatcher, leases


def start(
    dispatcher: Dispatcher, slots: Slots, channel: FakeChannel, tasks: list[ClaimedTask]
) -> list[FakeDelivery]:
    """As the claimer does: take the slots, then start the claimed tasks."""
    deliveries = [channel.deliver(body(t.id, t.epoch - 1)) for t in tasks]
    slots.take(len(tasks))
    dispatcher.start([Claimed(t, d) for t, d in zip(tasks, deliveries, strict=True)])
    return deliveries


def by_id(out: list[Ended]) -> dict[int, Ended]:
    ids = [e.task.id for e in out]
    assert len(ids) == len(set(ids)), f"a task was finished more than once: {ids}"
    return {e.task.id: e for e in out}


async def test_dispatcher_turns_a_handler_that_raises_into_a_failed_outcome(
    pool: ThreadPoolExecutor, channel: FakeChannel
) -> None:
    registry, slots, out = Registry(), Slots(4), list[Ended]()

    @registry.task("parts.async_raises")
    async def async_raises(payload: Any, ctx: AsyncTaskContext) -> None:
        raise ValueError(f"bad payload {payload['n']}")

    @registry.task("parts.sync_raises")
    def sync_raises(payload: Any, ctx: TaskContext) -> None:
        raise KeyError("missing")

    @registry.task("parts.aborts")
    async def aborts(payload: Any, ctx: AsyncTaskContext) -> None:
        raise Abort("give up")

    dispatcher, _ = dispatcher_for(registry, pool, slots, out)
    tasks = [
        claimed_task(1, 1, "parts.async_raises"),
        claimed_task(2, 1, "parts.sync_raises"),
        claimed_task(3, 1, "parts.aborts"),
    ]
    start(dispatcher, slots, channel, tasks)
    await dispatcher.drain(5)

    results = {i: e.result for i, e in by_id(out).items()}
    assert all(isinstance(r, Outcome) for r in results.values())
    first, second, third = (cast(Outcome, results[i]) for i in (1, 2, 3))
    assert (first.fence, first.verdict, first.delay) == ((1, 1), "retry", 7.0)
    assert first.error is not None and "ValueError: bad payload 1" in first.error
    assert (second.verdict, second.fence) == ("retry", (2, 1))
    assert second.error is not None and "KeyError" in second.error
    assert (third.verdict, third.fence) == ("dead", (3, 1))  # Abort: no more attempts
    assert third.error is not None and "give up" in third.error
    assert slots.free == 4


async def test_dispatcher_hands_every_claimed_task_to_finish_exactly_once(
    pool: ThreadPoolExecutor, channel: FakeChannel
) -> None:
    registry, slots, out = Registry(), Slots(10), list[Ended]()

    @registry.task("parts.ok")
    async def ok(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.sleep(0)

    @registry.task("parts.sync_ok")
    def sync_ok(payload: Any, ctx: TaskContext) -> None:
        return None

    @registry.task("parts.fails")
    async def fails(payload: Any, ctx: AsyncTaskContext) -> None:
        raise RuntimeError("no")

    @registry.task("parts.grouped", group_commit=True)
    async def grouped(payload: Any, ctx: AsyncTaskContext) -> None:
        return None

    group = StubGroup(True)
    dispatcher, leases = dispatcher_for(registry, pool, slots, out, group)
    tasks = [
        claimed_task(1, 1, "parts.ok"),
        claimed_task(2, 1, "parts.sync_ok"),
        claimed_task(3, 1, "parts.fails"),
        claimed_task(4, 1, "parts.unregistered"),
        claimed_task(5, 1, "parts.grouped"),
        claimed_task(6, 1, "parts.grouped"),
    ]
    deliveries = start(dispatcher, slots, channel, tasks)
    assert len(leases) == 6  # every claimed task is heartbeated from the start
    await dispatcher.drain(5)

    ended_by_id = by_id(out)
    assert sorted(ended_by_id) == [1, 2, 3, 4, 5, 6]
    assert group.batches == [[5, 6]]
    assert ended_by_id[1].result == Outcome.succeeded((1, 1))
    assert ended_by_id[2].result == Outcome.succeeded((2, 1))
    assert cast(Outcome, ended_by_id[3].result).verdict == "retry"
    missing = cast(Outcome, ended_by_id[4].result)
    assert missing.verdict == "retry" and "no handler registered" in (missing.error or "")
    assert ended_by_id[5].result == ended_by_id[6].result == Committed(True)
    assert [ended_by_id[t.id].delivery for t in tasks] == deliveries
    assert slots.free == 10  # every slot came back
    assert len(dispatcher) == 0


async def test_dispatcher_runs_each_grouped_task_on_its_own_when_the_group_fails(
    pool: ThreadPoolExecutor, channel: FakeChannel
) -> None:
    registry, slots, out = Registry(), Slots(4), list[Ended]()
    runs: list[int] = []

    @registry.task("parts.grouped", group_commit=True)
    async def grouped(payload: Any, ctx: AsyncTaskContext) -> None:
        runs.append(ctx.id)

    group = StubGroup(RuntimeError("group commit broke"))
    dispatcher, _ = dispatcher_for(registry, pool, slots, out, group)
    grouped_tasks = [claimed_task(1, 1, "parts.grouped"), claimed_task(2, 1, "parts.grouped")]
    start(dispatcher, slots, channel, grouped_tasks)
    await dispatcher.drain(5)

    assert group.batches == [[1, 2]]
    assert sorted(runs) == [1, 2]
    assert {i: e.result for i, e in by_id(out).items()} == {
        1: Outcome.succeeded((1, 1)),
        2: Outcome.succeeded((2, 1)),
    }
    assert slots.free == 4


async def test_a_handler_still_running_after_the_grace_ends_once_as_a_retried_attempt(
    pool: ThreadPoolExecutor, channel: FakeChannel
) -> None:
    registry, slots, out = Registry(), Slots(2), list[Ended]()

    @registry.task("parts.hangs")
    async def hangs(payload: Any, ctx: AsyncTaskContext) -> None:
        await asyncio.Event().wait()

    dispatcher, _ = dispatcher_for(registry, pool, slots, out)
    start(dispatcher, slots, channel, [claimed_task(1, 1, "parts.hangs")])
    await asyncio.sleep(0.01)
    assert out == []

    await dispatcher.drain(0.05)

    assert [e.result for e in out] == [Outcome.failed((1, 1), SHUTDOWN)]
    assert slots.free == 2
