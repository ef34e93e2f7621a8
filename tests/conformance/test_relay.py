"""The relay's side: ``publish_batch`` and its ``mark_published``, within the live
windows of the workers' subscriptions (routing), on every single-database
implementation; on MariaDB too (``ON_MARIADB``), but the windows' report (an
inspection)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledgerq import TaskSpec
from ledgerq.ledger.model import DueTask, Outcome
from ledgerq.ledger.protocol import LedgerWithHarness
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import RateLimit
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE
from tests.conformance.support import (
    LEASE_S,
    SUBSCRIBER,
    WORKER,
    Enqueue,
    claim_one,
    publish,
    when,
    window,
)

IMPLEMENTATIONS = ONE_DATABASE


# -- publish_batch and mark_published --------------------------------------------------


@ON_MARIADB
async def test_publish_batch_returns_only_due_pending_rows(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    due, later, running, published = enqueue("conf.pub", "conf.pub", "conf.pub", "conf.pub")
    [not_yet] = enqueue(TaskSpec("conf.pub", delay=3600))
    [urgent] = enqueue(TaskSpec("conf.pub", priority=5))
    await claim_one(ledger, running)
    assert await publish(ledger, [published]) == {published}

    async with ledger.publish_batch(10) as batch:
        rows = batch.rows

    assert [r.id for r in rows] == [urgent, due, later]  # priority first, then due order
    assert not_yet not in {r.id for r in rows}
    assert rows[0] == DueTask(urgent, "conf.pub", "default", 5, 0)


@ON_MARIADB
async def test_publish_batch_takes_at_most_its_limit(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.pub"] * 5)

    async with ledger.publish_batch(2) as batch:
        assert [r.id for r in batch.rows] == ids[:2]


@ON_MARIADB
async def test_publish_batches_open_at_once_never_share_a_row(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    first, second = enqueue("conf.pub", "conf.pub")

    async with ledger.publish_batch(1) as one, ledger.publish_batch(10) as other:
        assert [r.id for r in one.rows] == [first]
        assert [r.id for r in other.rows] == [second]  # SKIP LOCKED: first is held


@ON_MARIADB
async def test_publish_due_marks_what_it_picks_published_and_commits(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    due, later, running = enqueue("conf.pub", "conf.pub", "conf.pub")
    [not_yet] = enqueue(TaskSpec("conf.pub", delay=3600))
    [urgent] = enqueue(TaskSpec("conf.pub", priority=5))
    await claim_one(ledger, running)

    rows = await ledger.publish_due(10)

    assert [r.id for r in rows] == [urgent, due, later]  # the pick's order
    assert rows[0] == DueTask(urgent, "conf.pub", "default", 5, 0)
    for task_id in (urgent, due, later):
        row = await ledger.show(task_id)
        assert (row["status"], row["publishes"], row["epoch"]) == ("published", 1, 0)
        assert row["published_at"] is not None
    assert (await ledger.show(not_yet))["status"] == "pending"
    assert await ledger.publish_due(10) == []  # committed: nothing is due twice


@ON_MARIADB
async def test_publish_due_takes_its_limit_and_skips_rows_a_batch_holds(
    ledger: LedgerWithHarness, rival: LedgerWithHarness, enqueue: Enqueue
) -> None:
    held, first, second, third = enqueue("conf.pub", "conf.pub", "conf.pub", "conf.pub")

    async with rival.publish_batch(1) as batch:
        assert [r.id for r in batch.rows] == [held]
        taken = [r.id for r in await ledger.publish_due(10)]
        assert taken == [first, second, third]  # SKIP LOCKED: held is another's

    assert [r.id for r in await ledger.publish_due(1)] == [held]  # its block left it pending


@ON_MARIADB
async def test_mark_published_moves_pending_rows_to_published(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    first, second = enqueue("conf.pub", "conf.pub")

    async with ledger.publish_batch(10) as batch:
        marked = await batch.mark_published([r for r in batch.rows if r.id == first])

    assert marked == {first}
    row = await ledger.show(first)
    assert (row["status"], row["publishes"], row["epoch"]) == ("published", 1, 0)
    assert row["published_at"] is not None
    assert (await ledger.show(second))["status"] == "pending"  # confirmed rows only


@ON_MARIADB
async def test_mark_published_republishes_a_published_row_and_counts_it(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.pub")
    await publish(ledger)
    await ledger.backdate([task_id], "published_at", 3600)  # simulate an hour without a claim
    stale_clock = when((await ledger.show(task_id))["published_at"])

    async with ledger.stalled_batch(0, 10, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == [task_id]
        marked = await batch.mark_published(batch.rows)

    assert marked == {task_id}
    row = await ledger.show(task_id)
    assert (row["status"], row["publishes"]) == ("published", 2)
    assert when(row["published_at"]) > stale_clock + timedelta(seconds=3000)  # clock restarted


@ON_MARIADB
async def test_mark_published_skips_a_row_whose_fence_moved_on(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    claimed, stale = enqueue("conf.pub", "conf.pub")
    await claim_one(ledger, claimed)  # a consumer won it: running under epoch 1

    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [stale]
        marked = await batch.mark_published(
            [
                DueTask(claimed, "conf.pub", "default", 0, 0),  # running now
                DueTask(stale, "conf.pub", "default", 0, 99),  # an epoch it never had
            ]
        )

    assert marked == set()
    assert (await ledger.show(claimed))["status"] == "running"
    assert ((await ledger.show(stale))["status"], (await ledger.show(stale))["publishes"]) == (
        "pending",
        0,
    )


@ON_MARIADB
async def test_a_publish_batch_whose_block_raises_rolls_back(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.pub", "conf.pub")

    class PublisherCrashed(Exception):
        pass

    with pytest.raises(PublisherCrashed):
        async with ledger.publish_batch(10) as batch:
            assert await batch.mark_published(batch.rows) == set(ids)
            raise PublisherCrashed

    for task_id in ids:
        row = await ledger.show(task_id)
        assert (row["status"], row["publishes"], row["published_at"]) == ("pending", 0, None)
    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == ids  # and the locks were released


@ON_MARIADB
async def test_publish_batch_picks_nothing_for_a_queue_no_live_subscriber_serves(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [served] = enqueue("conf.win")
    [unserved] = enqueue(TaskSpec("conf.win", queue="other"))
    await window(ledger, 10, "default")  # "other" has no live subscriber now

    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [served]
    await ledger.unsubscribe(SUBSCRIBER)
    async with ledger.publish_batch(10) as batch:
        assert batch.rows == []
    assert await ledger.whereabouts([served, unserved]) == {served: "pending", unserved: "pending"}


@ON_MARIADB
async def test_publish_batch_takes_at_most_each_windows_room(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.win"] * 5)
    await window(ledger, 3, "default")

    assert await publish(ledger) == set(ids[:3])  # capacity 3, nothing published yet
    async with ledger.publish_batch(10) as batch:
        assert batch.rows == []  # room: 3 - 3 published
    await claim_one(ledger, ids[0])  # a claim frees a place in the window
    assert await publish(ledger) == {ids[3]}
    async with ledger.publish_batch(10) as batch:
        assert batch.rows == []  # full again


async def test_the_windows_report_says_each_windows_room(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.win"] * 5)
    await window(ledger, 3, "default")

    assert await publish(ledger) == set(ids[:3])
    assert {w["queue"]: w["room"] for w in await ledger.windows()} == {"default": 0}
    await claim_one(ledger, ids[0])
    assert {w["queue"]: w["room"] for w in await ledger.windows()} == {"default": 1}


@ON_MARIADB
async def test_publish_batch_gives_a_routed_subscription_only_its_kinds_on_its_route(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    mine, theirs = enqueue("conf.mine", "conf.theirs")
    await window(ledger, 10, "default", kinds=frozenset({"conf.mine"}))
    route = Subscription("default", frozenset({"conf.mine"})).route
    assert route is not None

    async with ledger.publish_batch(10) as batch:
        assert batch.rows == [DueTask(mine, "conf.mine", "default", 0, 0, route=route)]
        await batch.mark_published(batch.rows)
    assert (await ledger.show(theirs))["status"] == "pending"  # no live route covers it


@ON_MARIADB
async def test_return_unpublished_takes_back_rows_whose_publish_failed(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.pub", "conf.pub")
    async with ledger.publish_batch(10) as batch:
        rows = batch.rows
        assert await batch.mark_published(rows) == set(ids)

    assert await ledger.return_unpublished(rows) == set(ids)  # the broker refused them

    for task_id in ids:
        row = await ledger.show(task_id)
        assert (row["status"], row["epoch"]) == ("pending", 1)
    assert await ledger.return_unpublished(rows) == set()  # fenced: their epoch moved on
    assert await ledger.return_unpublished([]) == set()


# -- the pick: aging, direct workers, overlapping windows, shards ----------------------


@ON_MARIADB
async def test_aged_tasks_go_first_at_priority_nine_and_the_direct_claim_agrees(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    old_low, retried, fresh_high, fresh_low = enqueue(
        TaskSpec("conf.age", priority=0),
        TaskSpec("conf.age", priority=5),
        TaskSpec("conf.age", priority=5),
        TaskSpec("conf.age", priority=0),
    )
    task = await claim_one(ledger, retried)  # a retry: behind the first attempts of its priority
    await ledger.finish([Outcome.failed(task.fence, "flaky", delay=0)])
    await ledger.backdate([old_low], "run_at", 600)  # due ten minutes: aged at 60 s

    async with ledger.publish_batch(10, aging_s=60.0) as batch:
        assert [(r.id, r.priority) for r in batch.rows] == [
            (old_low, 9),
            (fresh_high, 5),
            (retried, 5),
            (fresh_low, 0),
        ]
    await ledger.subscribe(SUBSCRIBER, [Subscription("default")], 600.0, direct=True)
    for limit, first in ((2, {old_low, fresh_high}), (1, {retried}), (1, {fresh_low})):
        won = await ledger.claim_due(["default"], limit, "conf-direct", 30.0, aging_s=60.0)
        assert {t.id for t in won} == first  # the relay's order, a limit at a time


@ON_MARIADB
async def test_a_rate_limited_kind_goes_only_within_its_bucket_relay_and_direct_alike(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    metered = enqueue(*["conf.metered"] * 5)
    free = enqueue(*["conf.free"] * 3)
    # A burst of 3 and a refill too slow to add a whole task while the test runs.
    await ledger.set_limit("conf.metered", RateLimit(0.001, 3.0), actor="conformance")

    async with ledger.publish_batch(2) as batch:  # the oldest first: the limit caps the kind
        assert [r.id for r in batch.rows] == metered[:2]
        assert await batch.mark_published(batch.rows) == set(metered[:2])
    async with ledger.publish_batch(100) as batch:  # one token left; the free kind unmetered
        assert [r.id for r in batch.rows] == [metered[2], *free]
        await batch.mark_published(batch.rows)
    async with ledger.publish_batch(100) as batch:
        assert batch.rows == []  # the bucket is empty: the rest wait in the ledger

    await ledger.set_limit("conf.metered", RateLimit(0.001, 1.0), actor="conformance")
    await ledger.subscribe(SUBSCRIBER, [Subscription("default")], 600.0, direct=True)
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [metered[3]]
    assert await ledger.claim_due(["default"], 10, WORKER, LEASE_S) == []
    await ledger.set_limit("conf.metered", None, actor="conformance")  # lifted: all go
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [metered[4]]


@ON_MARIADB
async def test_a_dead_task_of_a_blocking_kind_holds_its_key_until_released(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    await ledger.register_ordering({"conf.block": "block"})
    held, waiting = enqueue(
        TaskSpec("conf.block", ordering_key="acct-1", max_attempts=1),
        TaskSpec("conf.after", ordering_key="acct-1"),
    )
    [other] = enqueue(TaskSpec("conf.after", ordering_key="acct-2"))
    task = await claim_one(ledger, held)
    await ledger.finish([Outcome.failed(task.fence, "poison", final=True)])

    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [other]  # acct-1 is held by its dead task
    await ledger.subscribe(SUBSCRIBER, [Subscription("default")], 600.0, direct=True)
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [other]

    released = await ledger.release_key("acct-1", actor="conformance")
    assert released.released == [held]
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [waiting]


@ON_MARIADB
async def test_publish_batch_leaves_to_direct_workers_the_kinds_they_claim(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    theirs, ours = enqueue("conf.direct", "conf.broker")
    await ledger.subscribe(
        "conf-direct", [Subscription("default", frozenset({"conf.direct"}))], 600.0, direct=True
    )
    try:
        async with ledger.publish_batch(10) as batch:
            assert [r.id for r in batch.rows] == [ours]  # its kind goes the direct way
        await ledger.subscribe("conf-direct", [Subscription("default")], 600.0, direct=True)
        async with ledger.publish_batch(10) as batch:
            assert batch.rows == []  # the whole queue is claimed directly
    finally:
        await ledger.unsubscribe("conf-direct")
    assert await ledger.whereabouts([theirs, ours]) == {theirs: "pending", ours: "pending"}


@ON_MARIADB
@pytest.mark.parametrize("narrow_room", [1, 5])
async def test_a_row_two_windows_cover_goes_once_to_the_one_with_more_room(
    ledger: LedgerWithHarness, enqueue: Enqueue, narrow_room: int
) -> None:
    ids = enqueue("conf.both", "conf.both", "conf.both")
    narrow = Subscription("default", frozenset({"conf.both"}), capacity=narrow_room)
    await ledger.subscribe("conf-narrow", [narrow], 600.0)
    await window(ledger, 3, "default")  # the whole queue: room for 3
    roomier = narrow.route if narrow_room > 3 else None
    try:
        async with ledger.publish_batch(10) as batch:
            assert [(r.id, r.route) for r in batch.rows] == [(i, roomier) for i in ids]
            assert await batch.mark_published(batch.rows) == set(ids)
    finally:
        await ledger.unsubscribe("conf-narrow")
    assert (await ledger.show(ids[0]))["route"] == (roomier or "")


@ON_MARIADB
async def test_a_window_of_some_shards_gets_only_their_tasks(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    zero, one = enqueue(TaskSpec("conf.sh", shard=0), TaskSpec("conf.sh", shard=1))
    sharded = Subscription("default", frozenset({"conf.sh"}), frozenset({1}), capacity=10)
    await ledger.subscribe(SUBSCRIBER, [sharded], 600.0)

    async with ledger.publish_batch(10) as batch:
        assert [(r.id, r.route) for r in batch.rows] == [(one, sharded.route)]
    assert (await ledger.show(zero))["status"] == "pending"


# -- the pick: pauses and ordering keys (the relay's window and the direct claim) ---------


@ON_MARIADB
async def test_a_paused_kind_is_neither_published_nor_claimed_until_it_is_resumed(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    sent, held, other = enqueue("conf.paused", "conf.paused", "conf.other")
    assert await publish(ledger, [sent]) == {sent}

    paused = await ledger.pause("kind", "conf.paused", actor="conformance")

    assert paused.unpublished == 1  # the published one comes back to the ledger
    assert await ledger.whereabouts([sent]) == {sent: "pending"}
    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [other]
    assert await ledger.claim([(sent, 0)], WORKER, LEASE_S) == []  # its message is stale
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [other]

    await ledger.resume("kind", "conf.paused", actor="conformance")
    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [sent, held]
    won = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    assert [t.id for t in won] == [sent, held]


@ON_MARIADB
async def test_the_tasks_of_an_ordering_key_go_one_at_a_time_in_id_order(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    first, second, third = enqueue(*[TaskSpec("conf.key", ordering_key="acct-1")] * 3)
    [alone] = enqueue(TaskSpec("conf.key", ordering_key="acct-2"))
    [free] = enqueue("conf.key")

    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [first, alone, free]  # one per key
        assert await batch.mark_published([r for r in batch.rows if r.id == first]) == {first}
    # A published task holds its key: the direct claim takes the others, not the next.
    direct = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    assert [t.id for t in direct] == [alone, free]
    async with ledger.publish_batch(10) as batch:
        assert batch.rows == []

    [task] = await ledger.claim([(first, 0)], WORKER, LEASE_S)
    [back] = await ledger.finish([Outcome.failed(task.fence, "flaky", delay=0)])
    assert back.status == "pending"  # a retried task keeps its place: still first
    async with ledger.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [first]
    [again] = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    await ledger.finish([Outcome.succeeded(again.fence)])

    [running] = await ledger.claim_due(["default"], 10, WORKER, LEASE_S)
    assert running.id == second
    assert await ledger.claim_due(["default"], 10, WORKER, LEASE_S) == []  # second runs
    await ledger.finish([Outcome.failed(running.fence, "poison", final=True)])
    # A dead task releases its key (ordering "release", the default).
    assert [t.id for t in await ledger.claim_due(["default"], 10, WORKER, LEASE_S)] == [third]
