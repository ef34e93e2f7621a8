"""The storage seam's contract, method by method, run against :class:`PgLedger` on
the real database (River's driver conformance suite, for ledgerq).

Each test states one promise of :mod:`ledgerq.ledger.protocol`: which rows an
operation acts on, what it returns, and that a compare-and-set on (id, epoch,
status) that lost moves nothing. Rows are created as a producer creates them
(``enqueue_many`` in a committed transaction) and moved only through the seam;
raw SQL appears only where a test simulates time passing (a timestamp set in the
past) or a fault, and says so.

Another implementation of the protocols could run this file by swapping the
``pg`` fixture.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue_many
from ledgerq.compose import open_ledger
from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import (
    LedgerqError,
    SchemaMissingError,
    StorageError,
    TaskNotFoundError,
    TransientStorageError,
)
from ledgerq.ledger.model import ClaimedTask, DueTask, ExpiredLease, Finished, Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url, sync_engine
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.routing import Subscription

WORKER = "conformance-worker"
SETTLE_S = 60.0
LEASE_S = 30.0

Enqueue = Callable[..., list[int]]


#: The live whole-queue subscriber every test starts with (see ``pg``).
SUBSCRIBER = "conformance-subscriber"


@pytest.fixture
async def pg(settings: Settings) -> AsyncIterator[PgLedger]:
    """The implementation under test, as the composition root opens it, with a live
    whole-queue subscriber on "default" and "other" whose window is larger than any
    test's rows: the relay's and the reconciler's batches pick only what a live
    window has room for (the window tests below change it)."""
    async with open_ledger(settings, "ledgerq-conformance", pool_size=3) as ledger:
        await window(ledger, 10_000)
        yield ledger


async def window(
    pg: PgLedger, capacity: int, *queues: str, kinds: frozenset[str] | None = None
) -> None:
    """Make ``SUBSCRIBER``'s live subscriptions these: each of ``queues`` ("default"
    and "other" if none) whole, with room for ``capacity`` tasks; or, with
    ``kinds=...``, only those kinds of it (a route of its own)."""
    await pg.subscribe(
        SUBSCRIBER,
        [Subscription(q, kinds, capacity=capacity) for q in queues or ("default", "other")],
        600.0,
    )


@pytest.fixture
def enqueue(settings: Settings) -> Iterator[Enqueue]:
    """Create tasks as a producer does: ``enqueue_many`` in a committed transaction."""
    engine = sync_engine(settings, "ledgerq-conformance-producer", pool_size=1)

    def create(*specs: TaskSpec | str, **options: Any) -> list[int]:
        tasks = [s if isinstance(s, TaskSpec) else TaskSpec(s, **options) for s in specs]
        with Session(engine) as session, session.begin():
            return enqueue_many(session, tasks)

    yield create
    engine.dispose()


@pytest.fixture
def raw(settings: Settings) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A plain connection, only for simulating time passing and for injected faults."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        yield conn


def age(
    conn: psycopg.Connection[tuple[Any, ...]], column: str, ids: Sequence[int], seconds: float
) -> None:
    """Simulate time passing: set ``column`` of the rows ``seconds`` in the past."""
    conn.execute(
        sql.SQL(
            "UPDATE ledgerq_tasks SET {} = now() - make_interval(secs => %s) WHERE id = ANY(%s)"
        ).format(sql.Identifier(column)),
        (seconds, list(ids)),
    )


def when(value: Any) -> datetime:
    """A timestamp as ``show`` returns it (ISO text)."""
    assert isinstance(value, str), value
    return datetime.fromisoformat(value)


async def claim_one(pg: PgLedger, task_id: int, epoch: int = 0) -> ClaimedTask:
    [won] = await pg.claim([(task_id, epoch)], WORKER, LEASE_S)
    return won


async def publish(pg: PgLedger, ids: Sequence[int] | None = None) -> set[int]:
    """The relay's step: lock due rows and mark them published (all, or ``ids``)."""
    async with pg.publish_batch(100) as batch:
        rows = [r for r in batch.rows if ids is None or r.id in ids]
        return await batch.mark_published(rows)


# -- claim --------------------------------------------------------------------------------


async def test_claim_wins_a_pending_row_with_its_current_epoch(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue(
        TaskSpec(
            "conf.claim",
            {"n": 1},
            queue="other",
            business_key="order-1",
            max_attempts=3,
            retry=[5.0],
            timeout=12.5,
        )
    )
    before = datetime.now(UTC)

    won = await pg.claim([(task_id, 0)], WORKER, LEASE_S)

    assert won == [
        ClaimedTask(
            id=task_id,
            epoch=1,
            kind="conf.claim",
            queue="other",
            payload={"n": 1},
            attempts=1,
            max_attempts=3,
            retry={"kind": "schedule", "delays": [5.0]},
            timeout_s=12.5,
            checkpoint=None,
            business_key="order-1",
            parent_id=None,
        )
    ]
    assert won[0].waited_s is not None and 0 <= won[0].waited_s < 60  # due since enqueue
    row = await pg.show(task_id)
    assert (row["status"], row["epoch"], row["attempts"], row["worker"]) == (
        "running",
        1,
        1,
        WORKER,
    )
    lease_until = when(row["lease_until"])
    assert before + timedelta(seconds=LEASE_S - 5) < lease_until
    assert lease_until < datetime.now(UTC) + timedelta(seconds=LEASE_S + 5)
    assert row["started_at"] is not None and row["publishes"] == 0


async def test_claim_accepts_a_published_row(pg: PgLedger, enqueue: Enqueue) -> None:
    [task_id] = enqueue("conf.claim")
    assert await publish(pg) == {task_id}

    won = await claim_one(pg, task_id, 0)

    assert (won.id, won.epoch, won.attempts) == (task_id, 1, 1)
    row = await pg.show(task_id)
    assert (row["status"], row["publishes"]) == ("running", 0)


async def test_claim_loses_with_a_stale_epoch_and_moves_nothing(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.claim")

    assert await pg.claim([(task_id, 1)], WORKER, LEASE_S) == []

    row = await pg.show(task_id)
    assert (row["status"], row["epoch"], row["attempts"]) == ("pending", 0, 0)


async def test_a_second_claim_of_the_same_fence_loses(pg: PgLedger, enqueue: Enqueue) -> None:
    [task_id] = enqueue("conf.claim")
    await claim_one(pg, task_id, 0)

    assert await pg.claim([(task_id, 0)], "another-worker", LEASE_S) == []
    # nor does the new epoch claim a row that is already running
    assert await pg.claim([(task_id, 1)], "another-worker", LEASE_S) == []

    row = await pg.show(task_id)
    assert (row["epoch"], row["attempts"], row["worker"]) == (1, 1, WORKER)


async def test_claim_in_a_batch_returns_only_the_rows_it_won(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    first, second, third = enqueue("conf.claim", "conf.claim", "conf.claim")
    await claim_one(pg, second)

    won = await pg.claim([(third, 0), (first, 0), (second, 0), (10**12, 0)], WORKER, LEASE_S)

    assert sorted((t.id, t.epoch) for t in won) == [(first, 1), (third, 1)]
    assert await pg.claim([], WORKER, LEASE_S) == []


async def test_a_reclaim_after_a_retry_counts_the_attempt_and_needs_the_new_epoch(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.claim")
    first = await claim_one(pg, task_id)
    await pg.finish([Outcome.failed(first.fence, "boom", delay=0)])

    assert await pg.claim([(task_id, 0)], WORKER, LEASE_S) == []  # the old message
    second = await claim_one(pg, task_id, first.epoch)

    assert (second.epoch, second.attempts) == (2, 2)


# -- finish -------------------------------------------------------------------------------


async def test_finish_succeeded_moves_the_row_to_history(pg: PgLedger, enqueue: Enqueue) -> None:
    [task_id] = enqueue("conf.finish", business_key="k-1", unique=True)
    task = await claim_one(pg, task_id)

    finished = await pg.finish([Outcome.succeeded(task.fence)])

    assert finished == [Finished(task_id, "conf.finish", 1, "succeeded", None)]
    row = await pg.show(task_id)
    assert (row["location"], row["status"], row["attempts"], row["epoch"]) == (
        "history",
        "succeeded",
        1,
        1,
    )
    assert row["finished_at"] is not None and row["lease_until"] is None
    assert row["dedupe_key"] is None  # the business key is free for a new live task
    assert await pg.whereabouts([task_id]) == {task_id: "succeeded"}


async def test_finish_retry_sends_the_row_back_to_pending_after_its_delay(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=3)
    task = await claim_one(pg, task_id)
    before = datetime.now(UTC)

    finished = await pg.finish([Outcome.failed(task.fence, "boom: try later", delay=3600)])

    assert finished == [Finished(task_id, "conf.finish", 1, "pending", "boom: try later")]
    row = await pg.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == (
        "live",
        "pending",
        "boom: try later",
    )
    assert when(row["run_at"]) > before + timedelta(seconds=3500)
    assert (row["epoch"], row["attempts"], row["worker"], row["lease_until"]) == (1, 1, None, None)
    async with pg.publish_batch(10) as batch:
        assert batch.rows == []  # not due before its delay


async def test_finish_retry_ends_the_task_dead_when_its_attempts_are_spent(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=1)
    task = await claim_one(pg, task_id)

    finished = await pg.finish([Outcome.failed(task.fence, "boom, the last time", delay=60)])

    assert finished == [Finished(task_id, "conf.finish", 1, "dead", "boom, the last time")]
    row = await pg.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == (
        "history",
        "dead",
        "boom, the last time",
    )


async def test_finish_dead_moves_the_row_to_history_at_once(pg: PgLedger, enqueue: Enqueue) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=5)
    task = await claim_one(pg, task_id)

    finished = await pg.finish([Outcome.failed(task.fence, "aborted", final=True)])

    assert finished == [Finished(task_id, "conf.finish", 1, "dead", "aborted")]
    row = await pg.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == ("history", "dead", "aborted")


async def test_finish_with_a_stale_fence_moves_nothing(pg: PgLedger, enqueue: Enqueue) -> None:
    running, pending = enqueue("conf.finish", "conf.finish")
    task = await claim_one(pg, running)

    finished = await pg.finish(
        [
            Outcome.succeeded((running, 0)),  # the epoch before the claim
            Outcome.failed((running, 7), "x", final=True),  # an epoch it never had
            Outcome.succeeded((pending, 0)),  # current epoch, but not running
            Outcome.failed((10**12, 0), "x"),  # no such task
        ]
    )

    assert finished == []
    assert (await pg.show(running))["status"] == "running"
    assert (await pg.show(running))["epoch"] == task.epoch
    assert (await pg.show(pending))["status"] == "pending"
    assert await pg.finish([]) == []


async def test_finish_takes_one_verdict_per_row_in_one_call(pg: PgLedger, enqueue: Enqueue) -> None:
    ok, again, dead, lost = enqueue("conf.a", "conf.b", "conf.c", "conf.d")
    fences = {
        t.id: t.fence for t in await pg.claim([(i, 0) for i in (ok, again, dead, lost)], WORKER, 30)
    }

    finished = await pg.finish(
        [
            Outcome.failed(fences[again], "later", delay=60.0),
            Outcome.succeeded(fences[ok]),
            Outcome.failed(fences[dead], "never", final=True),
            Outcome.succeeded((lost, 0)),
        ]
    )

    assert sorted((f.id, f.kind, f.status) for f in finished) == [
        (ok, "conf.a", "succeeded"),
        (again, "conf.b", "pending"),
        (dead, "conf.c", "dead"),
    ]
    assert await pg.whereabouts([ok, again, dead, lost]) == {
        ok: "succeeded",
        again: "pending",
        dead: "dead",
        lost: "running",
    }


async def test_finish_accepts_a_whole_number_delay_next_to_a_fractional_one(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    # Outcome.delay is a float, and an int is a float to the type checker (and to
    # Python): a caller may well write delay=60.
    first, second = enqueue("conf.finish", "conf.finish")
    one, two = await claim_one(pg, first), await claim_one(pg, second)

    finished = await pg.finish(
        [Outcome.failed(one.fence, "later", delay=60), Outcome.failed(two.fence, "x", delay=0.5)]
    )

    assert sorted((f.id, f.status) for f in finished) == [(first, "pending"), (second, "pending")]


# -- publish_batch and mark_published --------------------------------------------------


async def test_publish_batch_returns_only_due_pending_rows(pg: PgLedger, enqueue: Enqueue) -> None:
    due, later, running, published = enqueue("conf.pub", "conf.pub", "conf.pub", "conf.pub")
    [not_yet] = enqueue(TaskSpec("conf.pub", delay=3600))
    [urgent] = enqueue(TaskSpec("conf.pub", priority=5))
    await claim_one(pg, running)
    assert await publish(pg, [published]) == {published}

    async with pg.publish_batch(10) as batch:
        rows = batch.rows

    assert [r.id for r in rows] == [urgent, due, later]  # priority first, then due order
    assert not_yet not in {r.id for r in rows}
    assert rows[0] == DueTask(urgent, "conf.pub", "default", 5, 0)


async def test_publish_batch_takes_at_most_its_limit(pg: PgLedger, enqueue: Enqueue) -> None:
    ids = enqueue(*["conf.pub"] * 5)

    async with pg.publish_batch(2) as batch:
        assert [r.id for r in batch.rows] == ids[:2]


async def test_publish_batches_open_at_once_never_share_a_row(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    first, second = enqueue("conf.pub", "conf.pub")

    async with pg.publish_batch(1) as one, pg.publish_batch(10) as other:
        assert [r.id for r in one.rows] == [first]
        assert [r.id for r in other.rows] == [second]  # SKIP LOCKED: first is held


async def test_mark_published_moves_pending_rows_to_published(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    first, second = enqueue("conf.pub", "conf.pub")

    async with pg.publish_batch(10) as batch:
        marked = await batch.mark_published([r for r in batch.rows if r.id == first])

    assert marked == {first}
    row = await pg.show(first)
    assert (row["status"], row["publishes"], row["epoch"]) == ("published", 1, 0)
    assert row["published_at"] is not None
    assert (await pg.show(second))["status"] == "pending"  # confirmed rows only


async def test_mark_published_republishes_a_published_row_and_counts_it(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    [task_id] = enqueue("conf.pub")
    await publish(pg)
    age(raw, "published_at", [task_id], 3600)  # simulate an hour without a claim
    stale_clock = when((await pg.show(task_id))["published_at"])

    async with pg.stalled_batch(0, 10, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == [task_id]
        marked = await batch.mark_published(batch.rows)

    assert marked == {task_id}
    row = await pg.show(task_id)
    assert (row["status"], row["publishes"]) == ("published", 2)
    assert when(row["published_at"]) > stale_clock + timedelta(seconds=3000)  # clock restarted


async def test_mark_published_skips_a_row_whose_fence_moved_on(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    claimed, stale = enqueue("conf.pub", "conf.pub")
    await claim_one(pg, claimed)  # a consumer won it: running under epoch 1

    async with pg.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [stale]
        marked = await batch.mark_published(
            [
                DueTask(claimed, "conf.pub", "default", 0, 0),  # running now
                DueTask(stale, "conf.pub", "default", 0, 99),  # an epoch it never had
            ]
        )

    assert marked == set()
    assert (await pg.show(claimed))["status"] == "running"
    assert ((await pg.show(stale))["status"], (await pg.show(stale))["publishes"]) == (
        "pending",
        0,
    )


async def test_a_publish_batch_whose_block_raises_rolls_back(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    ids = enqueue("conf.pub", "conf.pub")

    class PublisherCrashed(Exception):
        pass

    with pytest.raises(PublisherCrashed):
        async with pg.publish_batch(10) as batch:
            assert await batch.mark_published(batch.rows) == set(ids)
            raise PublisherCrashed

    for task_id in ids:
        row = await pg.show(task_id)
        assert (row["status"], row["publishes"], row["published_at"]) == ("pending", 0, None)
    async with pg.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == ids  # and the locks were released


async def test_publish_batch_picks_nothing_for_a_queue_no_live_subscriber_serves(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [served] = enqueue("conf.win")
    [unserved] = enqueue(TaskSpec("conf.win", queue="other"))
    await window(pg, 10, "default")  # "other" has no live subscriber now

    async with pg.publish_batch(10) as batch:
        assert [r.id for r in batch.rows] == [served]
    await pg.unsubscribe(SUBSCRIBER)
    async with pg.publish_batch(10) as batch:
        assert batch.rows == []
    assert await pg.whereabouts([served, unserved]) == {served: "pending", unserved: "pending"}


async def test_publish_batch_takes_at_most_each_windows_room(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    ids = enqueue(*["conf.win"] * 5)
    await window(pg, 3, "default")

    assert await publish(pg) == set(ids[:3])  # capacity 3, nothing published yet
    async with pg.publish_batch(10) as batch:
        assert batch.rows == []  # room: 3 - 3 published
    await claim_one(pg, ids[0])  # a claim frees a place in the window
    assert await publish(pg) == {ids[3]}
    assert {w["queue"]: w["room"] for w in await pg.windows()} == {"default": 0}


async def test_publish_batch_gives_a_routed_subscription_only_its_kinds_on_its_route(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    mine, theirs = enqueue("conf.mine", "conf.theirs")
    await window(pg, 10, "default", kinds=frozenset({"conf.mine"}))
    route = Subscription("default", frozenset({"conf.mine"})).route
    assert route is not None

    async with pg.publish_batch(10) as batch:
        assert batch.rows == [DueTask(mine, "conf.mine", "default", 0, 0, route=route)]
        await batch.mark_published(batch.rows)
    assert (await pg.show(theirs))["status"] == "pending"  # no live route covers it


# -- heartbeat and save_checkpoint ------------------------------------------------------


async def test_heartbeat_extends_only_the_leases_still_held(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    held, lost, pending = enqueue("conf.hb", "conf.hb", "conf.hb")
    held_task = await claim_one(pg, held)
    lost_task = await claim_one(pg, lost)
    await pg.finish([Outcome.failed(lost_task.fence, "rescued", delay=0)])  # fence moved on
    age(raw, "lease_until", [held], -5)  # simulate a lease about to run out (5 s left)

    extended = await pg.heartbeat(
        [held_task.fence, lost_task.fence, (pending, 0), (10**12, 0)], 600.0
    )

    assert extended == frozenset({held}) and extended.cancelling == frozenset()
    lease = when((await pg.show(held))["lease_until"])
    assert lease > datetime.now(UTC) + timedelta(seconds=500)
    # a fence from before a re-claim does not hold either, though the row is running
    again = await claim_one(pg, lost, lost_task.epoch)
    assert await pg.heartbeat([lost_task.fence], 600.0) == frozenset()
    assert await pg.heartbeat([again.fence], 600.0) == frozenset({lost})
    assert await pg.heartbeat([], 600.0) == frozenset()


async def test_save_checkpoint_is_fenced_and_the_next_attempt_sees_it(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.cp")
    task = await claim_one(pg, task_id)

    assert await pg.save_checkpoint(task.fence, {"step": 2, "of": [1, 2, 3]}) is True
    assert await pg.save_checkpoint((task_id, 0), {"step": "stale"}) is False

    assert (await pg.show(task_id))["checkpoint"] == {"step": 2, "of": [1, 2, 3]}
    await pg.finish([Outcome.failed(task.fence, "crash", delay=0)])
    assert await pg.save_checkpoint(task.fence, {"step": "not running"}) is False
    again = await claim_one(pg, task_id, task.epoch)
    assert again.checkpoint == {"step": 2, "of": [1, 2, 3]}


# -- whereabouts --------------------------------------------------------------------------


async def test_whereabouts_covers_live_and_history_and_omits_unknown_ids(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    pending, running, done, dead = enqueue("conf.w", "conf.w", "conf.w", "conf.w")
    await claim_one(pg, running)
    done_task, dead_task = await claim_one(pg, done), await claim_one(pg, dead)
    await pg.finish(
        [Outcome.succeeded(done_task.fence), Outcome.failed(dead_task.fence, "x", final=True)]
    )

    where = await pg.whereabouts([pending, running, done, dead, 10**12, pending])

    assert where == {pending: "pending", running: "running", done: "succeeded", dead: "dead"}
    assert await pg.whereabouts([]) == {}


# -- the reconciler's operations --------------------------------------------------------


async def test_exclusive_lets_one_holder_at_a_time(settings: Settings, pg: PgLedger) -> None:
    async with open_ledger(settings, "ledgerq-conformance-rival", pool_size=1) as rival:
        async with pg.exclusive() as first:
            assert first is True
            async with rival.exclusive() as second:
                assert second is False
        async with rival.exclusive() as after_release:
            assert after_release is True
            async with pg.exclusive() as meanwhile:
                assert meanwhile is False


async def test_stalled_batch_picks_published_rows_unclaimed_past_their_window(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    stalled, fresh, pending, running = enqueue("conf.s", "conf.s", "conf.s", "conf.s")
    [slow_queue] = enqueue(TaskSpec("conf.s", queue="other"))
    await publish(pg, [stalled, fresh, running, slow_queue])
    await claim_one(pg, running)
    # Simulate time passing: 10 minutes since these were published.
    age(raw, "published_at", [stalled, slow_queue], 600)
    age(raw, "published_at", [running], 600)
    age(raw, "run_at", [pending], 600)

    async with pg.stalled_batch(0, 10, 60.0, {"other": 3600.0}) as batch:
        assert [r.id for r in batch.rows] == [stalled]  # "other" waits an hour

    async with pg.stalled_batch(0, 10, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == [stalled, slow_queue]
        assert batch.rows[0] == DueTask(stalled, "conf.s", "default", 0, 0)


async def test_stalled_batch_pages_by_id_and_respects_its_limit(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    ids = enqueue(*["conf.s"] * 3)
    await publish(pg)
    age(raw, "published_at", ids, 600)  # simulate ten minutes without a claim

    async with pg.stalled_batch(0, 2, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
    async with pg.stalled_batch(ids[1], 2, 60.0, {}) as batch:
        assert [r.id for r in batch.rows] == ids[2:]


async def test_the_stall_window_doubles_with_each_publication(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    once, twice = enqueue("conf.s", "conf.s")
    await publish(pg)
    age(raw, "published_at", [twice], 600)  # simulate a stall ...
    async with pg.stalled_batch(0, 10, 60.0, {}) as batch:
        await batch.mark_published(batch.rows)  # ... and its re-publication
    age(raw, "published_at", [once, twice], 90)  # 90 s since each last publication

    async with pg.stalled_batch(0, 10, 60.0, {}) as batch:
        # publishes=1: window 60 s, stalled; publishes=2: window 120 s, not yet
        assert [r.id for r in batch.rows] == [once]


async def test_overdue_batch_picks_pending_rows_due_longer_than_the_window(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    overdue, due_now, published, later = enqueue("conf.o", "conf.o", "conf.o", "conf.o")
    [future] = enqueue(TaskSpec("conf.o", delay=3600))
    await publish(pg, [published])
    # Simulate time passing: these have been due for ten minutes.
    age(raw, "run_at", [overdue, published, later], 600)

    async with pg.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == [overdue, later]
        assert future not in {r.id for r in batch.rows} and due_now not in {
            r.id for r in batch.rows
        }
        assert await batch.mark_published(batch.rows[:1]) == {overdue}
    async with pg.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == [later]  # each call picks anew
    assert (await pg.show(overdue))["status"] == "published"


async def test_overdue_batch_picks_only_what_the_windows_have_room_for(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    ids = enqueue(*["conf.o"] * 3)
    age(raw, "run_at", ids, 600)  # simulate ten minutes overdue
    await window(pg, 2)

    async with pg.overdue_batch(10, 60.0) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
        await batch.mark_published(batch.rows)
    async with pg.overdue_batch(10, 60.0) as batch:
        assert batch.rows == []  # the window is full: two published, room for two
    await pg.unsubscribe(SUBSCRIBER)
    await publish(pg)  # (no window: nothing)
    async with pg.overdue_batch(10, 60.0) as batch:
        assert batch.rows == []  # nobody serves the queue: the row waits pending
    assert (await pg.show(ids[2]))["status"] == "pending"


async def test_expired_batch_picks_running_rows_whose_lease_ran_out_and_finishes_them(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    expired, alive, pending = enqueue(
        TaskSpec("conf.e", retry=[30.0]), TaskSpec("conf.e"), TaskSpec("conf.e")
    )
    [lapsed] = await pg.claim([(expired, 0)], "w-2", LEASE_S)
    await claim_one(pg, alive)
    age(raw, "lease_until", [expired], 5)  # simulate the lease running out 5 s ago
    age(raw, "run_at", [pending], 600)

    async with pg.expired_batch(0, 10, await pg.silent_workers(), SETTLE_S) as batch:
        assert batch.rows == [
            ExpiredLease(expired, 1, "conf.e", 1, {"kind": "schedule", "delays": [30.0]}, "w-2")
        ]
        finished = await batch.finish([r.outcome() for r in batch.rows])

    assert [(f.id, f.status) for f in finished] == [(expired, "pending")]
    row = await pg.show(expired)
    assert row["status"] == "pending" and "stopped heartbeating" in row["last_error"]
    assert await pg.heartbeat([lapsed.fence], LEASE_S) == frozenset()  # the old worker lost it
    async with pg.expired_batch(0, 10, await pg.silent_workers(), SETTLE_S) as batch:
        assert batch.rows == []


async def test_expired_batch_pages_by_id_and_respects_its_limit(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    ids = enqueue(*["conf.e"] * 3)
    await pg.claim([(i, 0) for i in ids], WORKER, LEASE_S)
    age(raw, "lease_until", ids, 5)  # simulate the leases running out 5 s ago

    async with pg.expired_batch(0, 2, await pg.silent_workers(), SETTLE_S) as batch:
        assert [r.id for r in batch.rows] == ids[:2]
    async with pg.expired_batch(ids[1], 2, await pg.silent_workers(), SETTLE_S) as batch:
        assert [r.id for r in batch.rows] == ids[2:]


async def test_a_worker_that_left_several_leases_has_them_released_uncharged_as_suspects(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    a, b, lone = enqueue("conf.e", "conf.e", "conf.e")
    await pg.claim([(a, 0), (b, 0)], "w-many", LEASE_S)
    await pg.claim([(lone, 0)], "w-one", LEASE_S)
    age(raw, "lease_until", [a, b, lone], 5)

    silent = await pg.silent_workers()
    assert silent == {"w-many": 2, "w-one": 1}
    async with pg.expired_batch(0, 10, silent, SETTLE_S) as batch:
        assert [(r.id, r.in_flight) for r in batch.rows] == [(a, 2), (b, 2), (lone, 1)]
        outcomes = [r.outcome() for r in batch.rows]
        assert [o.verdict for o in outcomes] == ["release", "release", "retry"]
        finished = await batch.finish(outcomes)
    assert {f.id: f.status for f in finished} == {a: "pending", b: "pending", lone: "pending"}

    rows = {i: await pg.show(i) for i in (a, b, lone)}
    for released in (a, b):
        assert (rows[released]["attempts"], rows[released]["suspect"]) == (0, True)
        assert "not charged" in rows[released]["last_error"]
    assert (rows[lone]["attempts"], rows[lone]["suspect"]) == (1, False)
    async with pg.publish_batch(10) as due:
        assert {(r.id, r.suspect) for r in due.rows} >= {(a, True), (b, True)}


async def test_a_worker_is_judged_only_once_all_its_leases_ran_out(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    early, late = enqueue("conf.e", "conf.e")
    await pg.claim([(early, 0), (late, 0)], "w-skew", LEASE_S)
    age(raw, "lease_until", [early], 5)  # claimed before the last heartbeat

    assert await pg.silent_workers() == {}
    async with pg.expired_batch(0, 10, {}, SETTLE_S) as batch:
        assert batch.rows == []  # not judged yet: its worker may still be alive
    age(raw, "lease_until", [early], SETTLE_S + 5)
    async with pg.expired_batch(0, 10, {}, SETTLE_S) as batch:
        # Expired for longer than the settle time: judged alone, whatever else runs.
        assert [(r.id, r.in_flight) for r in batch.rows] == [(early, 1)]


async def test_an_expired_batch_whose_block_raises_finishes_nothing(
    pg: PgLedger, enqueue: Enqueue, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    [task_id] = enqueue("conf.e")
    await claim_one(pg, task_id)
    age(raw, "lease_until", [task_id], 5)  # simulate the lease running out

    with pytest.raises(ZeroDivisionError):
        async with pg.expired_batch(0, 10, await pg.silent_workers(), SETTLE_S) as batch:
            await batch.finish([r.outcome() for r in batch.rows])
            _ = 1 / 0

    assert (await pg.show(task_id))["status"] == "running"
    assert await pg.count_expired() == 1


# -- inspection ---------------------------------------------------------------------------


async def test_stats_count_live_and_history_by_status_and_kind(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    assert await pg.stats() == {"total": 0, "by_status": {}, "by_kind": {}}
    a, b, _ = enqueue("conf.x", "conf.x", "conf.y")
    task = await claim_one(pg, a)
    await pg.finish([Outcome.succeeded(task.fence)])
    await claim_one(pg, b)

    assert await pg.stats() == {
        "total": 3,
        "by_status": {"succeeded": 1, "running": 1, "pending": 1},
        "by_kind": {"conf.x": {"succeeded": 1, "running": 1}, "conf.y": {"pending": 1}},
    }
    assert await pg.count_finished() == 1


async def test_show_returns_every_column_and_where_the_task_is(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue(TaskSpec("conf.show", {"a": [1, 2]}, business_key="b-7", priority=3))

    row = await pg.show(task_id)

    assert row["location"] == "live"
    assert (row["id"], row["kind"], row["payload"], row["business_key"], row["priority"]) == (
        task_id,
        "conf.show",
        {"a": [1, 2]},
        "b-7",
        3,
    )
    assert {"status", "epoch", "attempts", "run_at", "created_at", "checkpoint"} <= set(row)
    assert isinstance(row["created_at"], str)  # timestamps as ISO text


async def test_show_of_an_unknown_id_raises_task_not_found(pg: PgLedger) -> None:
    with pytest.raises(TaskNotFoundError) as caught:
        await pg.show(10**12)
    assert isinstance(caught.value, LookupError) and isinstance(caught.value, LedgerqError)


# -- errors never cross the seam as driver exceptions --------------------------------------


async def test_a_terminated_backend_surfaces_as_a_transient_storage_error(
    settings: Settings, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    name = f"ledgerq-victim-{uuid.uuid4().hex[:8]}"
    async with open_ledger(settings, name, pool_size=1) as victim:
        assert await victim.whereabouts([1]) == {}  # the pooled connection is open
        [[killed]] = raw.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE application_name = %s",
            (name,),
        ).fetchall()
        assert killed == 1
        await asyncio.sleep(0.1)

        with pytest.raises(TransientStorageError) as caught:
            await victim.whereabouts([1])

        assert not isinstance(caught.value, psycopg.Error)
        assert isinstance(caught.value.__cause__, sa_exc.DBAPIError)
        # worth retrying as it is: the pool has let the dead connection go
        assert await victim.whereabouts([1]) == {}


async def test_a_terminated_backend_under_a_publish_batch_is_transient_too(
    settings: Settings, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    name = f"ledgerq-victim-{uuid.uuid4().hex[:8]}"
    async with open_ledger(settings, name, pool_size=1) as victim:
        with pytest.raises(TransientStorageError):
            async with victim.publish_batch(10) as batch:
                assert batch.rows == []
                raw.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (name,),
                )
                await asyncio.sleep(0.1)
                await batch.mark_published([DueTask(1, "k", "default", 0, 0)])


@pytest.fixture
def throwaway(base_settings: Settings) -> Iterator[Settings]:
    """A database of its own, migrated, for damaging on purpose."""
    url = make_url(base_settings.database_url)
    name = f"{url.database}_throwaway"
    maintenance = libpq_url(url.set(database="postgres").render_as_string(False))

    def drop() -> None:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    drop()
    scratch = replace(base_settings, database_url=url.set(database=name).render_as_string(False))
    upgrade(scratch)  # creates the database, then the schema
    yield scratch
    drop()


async def test_a_missing_table_surfaces_as_a_storage_error_that_is_not_transient(
    throwaway: Settings,
) -> None:
    with psycopg.connect(libpq_url(throwaway.database_url), autocommit=True) as conn:
        # (CASCADE: the due rule's view reads history too, migration 0014.)
        conn.execute("DROP TABLE ledgerq_history CASCADE")

    # check=False: open it anyway (the start check would refuse this ledger).
    async with open_ledger(
        throwaway, "ledgerq-conformance-broken", pool_size=1, check=False
    ) as broken:
        with pytest.raises(StorageError) as caught:
            await broken.show(1)

    # A missing table is its own kind: services stop on it rather than retry.
    assert type(caught.value) is SchemaMissingError  # a StorageError, not transient
    assert not isinstance(caught.value, TransientStorageError)
    assert isinstance(caught.value.__cause__, sa_exc.DBAPIError)
    assert "ledgerq_history" in str(caught.value)


async def test_bad_data_surfaces_as_a_storage_error_that_is_not_transient(
    pg: PgLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.bad")
    task = await claim_one(pg, task_id)

    # NaN is not JSON: PostgreSQL refuses the document.
    with pytest.raises(StorageError) as caught:
        await pg.save_checkpoint(task.fence, {"ratio": float("nan")})

    assert type(caught.value) is StorageError
    assert not isinstance(caught.value, psycopg.Error)
    assert (await pg.show(task_id))["checkpoint"] is None
