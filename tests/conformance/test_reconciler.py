"""The reconciler's side: its lock, and the stalled, overdue and expired batches,
on every single-database implementation. Time passes through ``backdate``."""

from __future__ import annotations

import pytest

from ledgerq import TaskSpec
from ledgerq.ledger.model import DueTask, ExpiredLease, Outcome
from ledgerq.ledger.protocol import LedgerWithHarness
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import RateLimit
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE
from tests.conformance.support import (
    LEASE_S,
    SETTLE_S,
    SUBSCRIBER,
    WORKER,
    Enqueue,
    claim_one,
    publish,
    window,
)

IMPLEMENTATIONS = ONE_DATABASE


# -- the reconciler's operations --------------------------------------------------------


@ON_MARIADB
async def test_exclusive_lets_one_holder_at_a_time(
    ledger: LedgerWithHarness, rival: LedgerWithHarness
) -> None:
    async with ledger.exclusive() as first:
        assert first is True
        async with rival.exclusive() as second:
            assert second is False
    async with rival.exclusive() as after_release:
        assert after_release is True
        async with ledger.exclusive() as meanwhile:
            assert meanwhile is False


@ON_MARIADB
async def test_stalled_batch_picks_published_rows_unclaimed_past_their_window(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    stalled, fresh, pending, running = enqueue("conf.s", "conf.s", "conf.s", "conf.s")
    [slow_queue] = enqueue(TaskSpec("conf.s", queue="other"))
    await publish(ledger, [stalled, fresh, running, slow_queue])
    await claim_one(ledger, running)
    # Simulate time passing: 10 minutes since these were published.
    await ledger.backdate([stalled, slow_queue], "published_at", 600)
    await ledger.backdate([running], "published_at", 600)
    await ledger.backdate([pending], "run_at", 600)

    async with ledger.stalled_batch(0, 10, 60.0, {"other": 3600.0}) as batch:
        assert [r.id for r in batch.rows] == [stalled]  # "other" waits an hour

    async with ledger.stalled_batch(0, 10, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == [stalled, slow_queue]
        assert batch.rows[0] == DueTask(stalled, "conf.s", "default", 0, 0)


@ON_MARIADB
async def test_stalled_batch_pages_by_id_and_respects_its_limit(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.s"] * 3)
    await publish(ledger)
    await ledger.backdate(ids, "published_at", 600)  # simulate ten minutes without a claim

    async with ledger.stalled_batch(0, 2, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
    async with ledger.stalled_batch(ids[1], 2, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == ids[2:]


@ON_MARIADB
async def test_the_stall_window_doubles_with_each_publication(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    once, twice = enqueue("conf.s", "conf.s")
    await publish(ledger)
    await ledger.backdate([twice], "published_at", 600)  # simulate a stall ...
    async with ledger.stalled_batch(0, 10, 60.0, {}) as batch:
        await batch.mark_published(batch.rows)  # ... and its re-publication
    await ledger.backdate([once, twice], "published_at", 90)  # 90 s since each last publication

    async with ledger.stalled_batch(0, 10, 60.0, {}) as batch:
        # publishes=1: window 60 s, stalled; publishes=2: window 120 s, not yet
        assert [r.id for r in batch.rows] == [once]


@ON_MARIADB
async def test_overdue_batch_picks_pending_rows_due_longer_than_the_window(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    overdue, due_now, published, later = enqueue("conf.o", "conf.o", "conf.o", "conf.o")
    [future] = enqueue(TaskSpec("conf.o", delay=3600))
    await publish(ledger, [published])
    # Simulate time passing: these have been due for ten minutes.
    await ledger.backdate([overdue, published, later], "run_at", 600)

    async with ledger.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == [overdue, later]
        assert future not in {r.id for r in batch.rows} and due_now not in {
            r.id for r in batch.rows
        }
        assert await batch.mark_published(batch.rows[:1]) == {overdue}
    async with ledger.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == [later]  # each call picks anew
    assert (await ledger.show(overdue))["status"] == "published"


@ON_MARIADB
async def test_overdue_batch_meters_a_rate_limited_kind_as_a_relay_does(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    await ledger.set_limit("conf.limited", RateLimit(1 / 60, 1.0), actor="conformance")
    limited, over_limit, free = enqueue("conf.limited", "conf.limited", "conf.o")
    await ledger.backdate([limited, over_limit, free], "run_at", 600)

    async with ledger.overdue_batch(10, 60.0) as batch:
        # One token: one limited task, after the aged unmetered one.
        assert [r.id for r in batch.rows] == [free, limited]
        assert await batch.mark_published(batch.rows) == {free, limited}
    async with ledger.overdue_batch(10, 60.0) as batch:
        assert batch.rows == []  # the bucket is spent, for relays and reconcilers alike
    async with ledger.publish_batch(10) as batch:
        assert batch.rows == []
    assert (await ledger.show(over_limit))["status"] == "pending"


@ON_MARIADB
async def test_overdue_batch_picks_only_what_the_windows_have_room_for(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.o"] * 3)
    await ledger.backdate(ids, "run_at", 600)  # simulate ten minutes overdue
    await window(ledger, 2)

    async with ledger.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
        await batch.mark_published(batch.rows)
    async with ledger.overdue_batch(10, 60.0) as batch:
        assert batch.rows == []  # the window is full: two published, room for two
    await ledger.unsubscribe(SUBSCRIBER)
    await publish(ledger)  # (no window: nothing)
    async with ledger.overdue_batch(10, 60.0) as batch:
        assert batch.rows == []  # nobody serves the queue: the row waits pending
    assert (await ledger.show(ids[2]))["status"] == "pending"


@ON_MARIADB
async def test_expired_batch_picks_running_rows_whose_lease_ran_out_and_finishes_them(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    expired, alive, pending = enqueue(
        TaskSpec("conf.e", retry=[30.0]), TaskSpec("conf.e"), TaskSpec("conf.e")
    )
    [lapsed] = await ledger.claim([(expired, 0)], "w-2", LEASE_S)
    await claim_one(ledger, alive)
    await ledger.backdate([expired], "lease_until", 5)  # simulate the lease running out 5 s ago
    await ledger.backdate([pending], "run_at", 600)

    async with ledger.expired_batch(0, 10, await ledger.silent_workers(), SETTLE_S) as batch:
        assert batch.rows == [
            ExpiredLease(expired, 1, "conf.e", 1, {"kind": "schedule", "delays": [30.0]}, "w-2")
        ]
        finished = await batch.finish([r.outcome() for r in batch.rows])

    assert [(f.id, f.status) for f in finished] == [(expired, "pending")]
    row = await ledger.show(expired)
    assert row["status"] == "pending" and "stopped heartbeating" in row["last_error"]
    assert await ledger.heartbeat([lapsed.fence], LEASE_S) == frozenset()  # the old worker lost it
    async with ledger.expired_batch(0, 10, await ledger.silent_workers(), SETTLE_S) as batch:
        assert batch.rows == []


@ON_MARIADB
async def test_expired_batch_pages_by_id_and_respects_its_limit(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.e"] * 3)
    await ledger.claim([(i, 0) for i in ids], WORKER, LEASE_S)
    await ledger.backdate(ids, "lease_until", 5)  # simulate the leases running out 5 s ago

    async with ledger.expired_batch(0, 2, await ledger.silent_workers(), SETTLE_S) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
    async with ledger.expired_batch(ids[1], 2, await ledger.silent_workers(), SETTLE_S) as batch:
        assert [r.id for r in batch.rows] == ids[2:]


@ON_MARIADB
async def test_a_worker_that_left_several_leases_has_them_released_uncharged_as_suspects(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    a, b, lone = enqueue("conf.e", "conf.e", "conf.e")
    await ledger.claim([(a, 0), (b, 0)], "w-many", LEASE_S)
    await ledger.claim([(lone, 0)], "w-one", LEASE_S)
    await ledger.backdate([a, b, lone], "lease_until", 5)

    silent = await ledger.silent_workers()
    assert silent == {"w-many": 2, "w-one": 1}
    async with ledger.expired_batch(0, 10, silent, SETTLE_S) as batch:
        assert [(r.id, r.in_flight) for r in batch.rows] == [(a, 2), (b, 2), (lone, 1)]
        outcomes = [r.outcome() for r in batch.rows]
        assert [o.verdict for o in outcomes] == ["release", "release", "retry"]
        finished = await batch.finish(outcomes)
    assert {f.id: f.status for f in finished} == {a: "pending", b: "pending", lone: "pending"}

    rows = {i: await ledger.show(i) for i in (a, b, lone)}
    for released in (a, b):
        assert (rows[released]["attempts"], rows[released]["suspect"]) == (0, True)
        assert "not charged" in rows[released]["last_error"]
    assert (rows[lone]["attempts"], rows[lone]["suspect"]) == (1, False)
    async with ledger.publish_batch(10) as due:
        assert {(r.id, r.suspect) for r in due.rows} >= {(a, True), (b, True)}


@ON_MARIADB
async def test_a_worker_is_judged_only_once_all_its_leases_ran_out(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    early, late = enqueue("conf.e", "conf.e")
    await ledger.claim([(early, 0), (late, 0)], "w-skew", LEASE_S)
    await ledger.backdate([early], "lease_until", 5)  # claimed before the last heartbeat

    assert await ledger.silent_workers() == {}
    async with ledger.expired_batch(0, 10, {}, SETTLE_S) as batch:
        assert batch.rows == []  # not judged yet: its worker may still be alive
    await ledger.backdate([early], "lease_until", SETTLE_S + 5)
    async with ledger.expired_batch(0, 10, {}, SETTLE_S) as batch:
        # Expired for longer than the settle time: judged alone, whatever else runs.
        assert [(r.id, r.in_flight) for r in batch.rows] == [(early, 1)]


@ON_MARIADB
async def test_an_expired_batch_whose_block_raises_finishes_nothing(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.e")
    await claim_one(ledger, task_id)
    await ledger.backdate([task_id], "lease_until", 5)  # simulate the lease running out

    with pytest.raises(ZeroDivisionError):
        async with ledger.expired_batch(0, 10, await ledger.silent_workers(), SETTLE_S) as batch:
            await batch.finish([r.outcome() for r in batch.rows])
            _ = 1 / 0

    assert (await ledger.show(task_id))["status"] == "running"
    assert await ledger.count_expired() == 1


# -- dead workers, unserved routes ---------------------------------------------------


@ON_MARIADB
async def test_a_dead_workers_rows_are_orphaned_and_its_subscriptions_lapse(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    held, other = enqueue(TaskSpec("conf.dead", retry=[0.0]), "conf.dead")
    await ledger.subscribe("w-dead", [Subscription("default")], 600.0)
    await ledger.alive("w-dead", 60.0)
    await ledger.alive("w-live", 60.0)
    await ledger.claim([(held, 0)], "w-dead", LEASE_S)
    await ledger.claim([(other, 0)], "w-live", LEASE_S)
    assert await ledger.dead_workers() == {}  # silent, not dead: nobody beat since

    await ledger.gone("w-dead")  # presumed dead at once ...
    await ledger.alive("w-live", 60.0)  # ... once another worker's beat comes after
    dead = await ledger.dead_workers()
    assert dead == {"w-dead": 1}
    assert await ledger.lapse_dead_subscriptions() == 1
    assert await ledger.lapse_dead_subscriptions() == 0

    async with ledger.orphaned_batch(0, 10, dead) as batch:
        assert [(r.id, r.worker, r.orphaned, r.in_flight) for r in batch.rows] == [
            (held, "w-dead", True, 1)
        ]
        finished = await batch.finish([r.outcome() for r in batch.rows])
    assert [(f.id, f.status) for f in finished] == [(held, "pending")]
    assert await ledger.whereabouts([held, other]) == {held: "pending", other: "running"}


@ON_MARIADB
async def test_a_dead_workers_rescue_is_audited_and_an_expired_lease_is_not(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    orphan, lapsed = enqueue(TaskSpec("conf.dead", retry=[0.0]), TaskSpec("conf.dead", retry=[0.0]))
    await ledger.alive("w-dead", 60.0)
    await ledger.claim([(orphan, 0)], "w-dead", LEASE_S)
    await ledger.claim([(lapsed, 0)], "w-late", LEASE_S)
    await ledger.backdate([lapsed], "lease_until", 5)  # simulate its lease running out
    await ledger.gone("w-dead")
    await ledger.alive("w-live", 60.0)  # another worker beats on: w-dead is dead

    async with ledger.orphaned_batch(0, 10, await ledger.dead_workers()) as batch:
        await batch.finish([r.outcome() for r in batch.rows])
    async with ledger.expired_batch(0, 10, await ledger.silent_workers(), SETTLE_S) as batch:
        assert [r.id for r in batch.rows] == [lapsed]
        await batch.finish([r.outcome() for r in batch.rows])

    [record] = await ledger.audit()
    assert (record["actor"], record["action"], record["selection"]) == (
        "ledgerq",
        "rescue_dead_worker",
        {"worker": ["w-dead"]},
    )
    assert (record["matched"], record["changed"], record["skipped"]) == (1, 1, 0)
    assert "presumed dead" in record["reason"]
    trail = (await ledger.find(orphan))["audit"]
    assert [(a["actor"], a["action"], a["outcome"]) for a in trail] == [
        ("ledgerq", "rescue_dead_worker", "changed")
    ]
    assert (await ledger.find(lapsed))["audit"] == []


@ON_MARIADB
async def test_unpublish_unserved_takes_back_what_no_live_subscriber_serves(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.u", "conf.u", "conf.u")
    assert await publish(ledger) == set(ids)
    assert await ledger.unpublish_unserved(10) == []  # still served

    await ledger.unsubscribe(SUBSCRIBER)
    first = await ledger.unpublish_unserved(2)  # a page at a time, never more
    assert len(first) == 2
    assert sorted(first + await ledger.unpublish_unserved(10)) == sorted(ids)
    assert await ledger.unpublish_unserved(10) == []

    row = await ledger.show(ids[0])
    assert (row["status"], row["epoch"]) == ("pending", 1)


@ON_MARIADB
async def test_kind_durations_are_the_recent_attempts_typical_length(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.slow")
    task = await claim_one(ledger, task_id)
    await ledger.finish([Outcome.succeeded(task.fence)])

    durations = await ledger.kind_durations()

    assert durations.get("conf.slow", 0.0) >= 0.0
    assert all(seconds >= 0 for seconds in durations.values())


@ON_MARIADB
async def test_expire_due_ends_queued_tasks_past_their_expiry_a_page_at_a_time(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue(*[TaskSpec("conf.exp", expires=60) for _ in range(3)], "conf.keep")
    running = enqueue(TaskSpec("conf.exp", expires=60))[0]
    await claim_one(ledger, running)  # a started task never expires
    await ledger.backdate([*ids[:3], running], "expires_at", 1)

    assert len(await ledger.expire_due(2)) == 2
    assert len(await ledger.expire_due(2)) == 1
    assert await ledger.expire_due(2) == []

    assert await ledger.whereabouts([*ids, running]) == {
        **{i: "cancelled" for i in ids[:3]},
        ids[3]: "pending",
        running: "running",
    }
    audits = [r for r in await ledger.audit() if r["action"] == "expire"]
    assert sorted(r["changed"] for r in audits) == [1, 2]


@ON_MARIADB
async def test_a_retry_due_after_the_expiry_never_runs(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [task_id] = enqueue(TaskSpec("conf.exp", expires=600))
    task = await claim_one(ledger, task_id)
    [back] = await ledger.finish([Outcome.failed(task.fence, "flaky", delay=3600)])
    assert back.status == "pending"  # started once: due again in an hour
    await ledger.backdate([task_id], "expires_at", 1)  # its expiry passes first
    await ledger.backdate([task_id], "run_at", 1)  # then the retry comes due

    assert await ledger.claim([(task_id, task.epoch)], WORKER, LEASE_S) == []
    shown = await ledger.show(task_id)
    assert (shown["status"], shown["expired"], shown["attempts"]) == ("cancelled", True, 1)
    assert [a["outcome"] for a in shown["attempt_log"]] == ["retry"]


@ON_MARIADB
async def test_a_queue_gone_direct_has_its_published_rows_taken_back_not_republished(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.u", "conf.u")
    assert await publish(ledger) == set(ids)
    await ledger.backdate(ids, "published_at", 600)  # stalled, were the route still served
    await ledger.subscribe("conf-direct", [Subscription("default")], 600.0, direct=True)
    try:
        async with ledger.stalled_batch(0, 10, 60.0, {}) as batch:
            assert batch.rows == []  # no relay publishes a queue claimed directly
        assert sorted(await ledger.unpublish_unserved(10)) == ids
        assert await ledger.unpublish_unserved(10) == []
    finally:
        await ledger.unsubscribe("conf-direct")
    assert await ledger.whereabouts(ids) == {i: "pending" for i in ids}
