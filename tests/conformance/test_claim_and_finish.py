"""The worker's side of the seam: ``claim``, ``finish`` and ``whereabouts`` (a
compare-and-set on (id, epoch, status) that lost moves nothing), on every
implementation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledgerq import TaskSpec
from ledgerq.ledger.model import ClaimedTask, Finished, Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import (
    LEASE_S,
    WORKER,
    Enqueue,
    claim_one,
    databases,
    publish,
    when,
)

# -- claim --------------------------------------------------------------------------------


@ON_MARIADB
async def test_claim_wins_a_pending_row_with_its_current_epoch(
    ledger: ShardLedger, enqueue: Enqueue
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

    won = await ledger.claim([(task_id, 0)], WORKER, LEASE_S)

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
    row = await ledger.show(task_id)
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


async def test_claim_accepts_a_published_row(ledger: ShardLedger, enqueue: Enqueue) -> None:
    [task_id] = enqueue("conf.claim")
    assert await publish(ledger) == {task_id}

    won = await claim_one(ledger, task_id, 0)

    assert (won.id, won.epoch, won.attempts) == (task_id, 1, 1)
    row = await ledger.show(task_id)
    assert (row["status"], row["publishes"]) == ("running", 0)


@ON_MARIADB
async def test_claim_loses_with_a_stale_epoch_and_moves_nothing(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.claim")

    assert await ledger.claim([(task_id, 1)], WORKER, LEASE_S) == []

    row = await ledger.show(task_id)
    assert (row["status"], row["epoch"], row["attempts"]) == ("pending", 0, 0)


@ON_MARIADB
async def test_a_second_claim_of_the_same_fence_loses(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.claim")
    await claim_one(ledger, task_id, 0)

    assert await ledger.claim([(task_id, 0)], "another-worker", LEASE_S) == []
    # nor does the new epoch claim a row that is already running
    assert await ledger.claim([(task_id, 1)], "another-worker", LEASE_S) == []

    row = await ledger.show(task_id)
    assert (row["epoch"], row["attempts"], row["worker"]) == (1, 1, WORKER)


@ON_MARIADB
async def test_claim_in_a_batch_returns_only_the_rows_it_won(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    first, second, third = enqueue("conf.claim", "conf.claim", "conf.claim")
    await claim_one(ledger, second)

    won = await ledger.claim([(third, 0), (first, 0), (second, 0), (10**12, 0)], WORKER, LEASE_S)

    assert sorted((t.id, t.epoch) for t in won) == [(first, 1), (third, 1)]
    assert await ledger.claim([], WORKER, LEASE_S) == []


@ON_MARIADB
async def test_a_reclaim_after_a_retry_counts_the_attempt_and_needs_the_new_epoch(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.claim")
    first = await claim_one(ledger, task_id)
    await ledger.finish([Outcome.failed(first.fence, "boom", delay=0)])

    assert await ledger.claim([(task_id, 0)], WORKER, LEASE_S) == []  # the old message
    second = await claim_one(ledger, task_id, first.epoch)

    assert (second.epoch, second.attempts) == (2, 2)


# -- finish -------------------------------------------------------------------------------


@ON_MARIADB
async def test_finish_succeeded_moves_the_row_to_history(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", business_key="k-1", unique=True)
    task = await claim_one(ledger, task_id)

    finished = await ledger.finish([Outcome.succeeded(task.fence)])

    assert finished == [Finished(task_id, "conf.finish", 1, "succeeded", None)]
    row = await ledger.show(task_id)
    assert (row["location"], row["status"], row["attempts"], row["epoch"]) == (
        "history",
        "succeeded",
        1,
        1,
    )
    assert row["finished_at"] is not None and row["lease_until"] is None
    assert row["dedupe_key"] is None  # the business key is free for a new live task
    assert await ledger.whereabouts([task_id]) == {task_id: "succeeded"}


async def test_finish_retry_sends_the_row_back_to_pending_after_its_delay(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=3)
    task = await claim_one(ledger, task_id)
    before = datetime.now(UTC)

    finished = await ledger.finish([Outcome.failed(task.fence, "boom: try later", delay=3600)])

    assert finished == [Finished(task_id, "conf.finish", 1, "pending", "boom: try later")]
    row = await ledger.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == (
        "live",
        "pending",
        "boom: try later",
    )
    assert when(row["run_at"]) > before + timedelta(seconds=3500)
    assert (row["epoch"], row["attempts"], row["worker"], row["lease_until"]) == (1, 1, None, None)
    for relay in databases(ledger):
        async with relay.publish_batch(10) as batch:
            assert batch.rows == []  # not due before its delay


@ON_MARIADB
async def test_finish_retry_ends_the_task_dead_when_its_attempts_are_spent(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=1)
    task = await claim_one(ledger, task_id)

    finished = await ledger.finish([Outcome.failed(task.fence, "boom, the last time", delay=60)])

    assert finished == [Finished(task_id, "conf.finish", 1, "dead", "boom, the last time")]
    row = await ledger.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == (
        "history",
        "dead",
        "boom, the last time",
    )


@ON_MARIADB
async def test_finish_dead_moves_the_row_to_history_at_once(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.finish", max_attempts=5)
    task = await claim_one(ledger, task_id)

    finished = await ledger.finish([Outcome.failed(task.fence, "aborted", final=True)])

    assert finished == [Finished(task_id, "conf.finish", 1, "dead", "aborted")]
    row = await ledger.show(task_id)
    assert (row["location"], row["status"], row["last_error"]) == ("history", "dead", "aborted")


@ON_MARIADB
async def test_finish_with_a_stale_fence_moves_nothing(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    running, pending = enqueue("conf.finish", "conf.finish")
    task = await claim_one(ledger, running)

    finished = await ledger.finish(
        [
            Outcome.succeeded((running, 0)),  # the epoch before the claim
            Outcome.failed((running, 7), "x", final=True),  # an epoch it never had
            Outcome.succeeded((pending, 0)),  # current epoch, but not running
            Outcome.failed((10**12, 0), "x"),  # no such task
        ]
    )

    assert finished == []
    assert (await ledger.show(running))["status"] == "running"
    assert (await ledger.show(running))["epoch"] == task.epoch
    assert (await ledger.show(pending))["status"] == "pending"
    assert await ledger.finish([]) == []


@ON_MARIADB
async def test_finish_takes_one_verdict_per_row_in_one_call(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    ok, again, dead, lost = enqueue("conf.a", "conf.b", "conf.c", "conf.d")
    fences = {
        t.id: t.fence
        for t in await ledger.claim([(i, 0) for i in (ok, again, dead, lost)], WORKER, 30)
    }

    finished = await ledger.finish(
        [
            Outcome.failed(fences[again], "later", delay=60.0),
            Outcome.succeeded(fences[ok]),
            Outcome.failed(fences[dead], "never", final=True),
            Outcome.succeeded((lost, 0)),
        ]
    )

    assert {(f.id, f.kind, f.status) for f in finished} == {
        (ok, "conf.a", "succeeded"),
        (again, "conf.b", "pending"),
        (dead, "conf.c", "dead"),
    }
    assert await ledger.whereabouts([ok, again, dead, lost]) == {
        ok: "succeeded",
        again: "pending",
        dead: "dead",
        lost: "running",
    }


@ON_MARIADB
async def test_finish_accepts_a_whole_number_delay_next_to_a_fractional_one(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    # Outcome.delay is a float, and an int is a float to the type checker (and to
    # Python): a caller may well write delay=60.
    first, second = enqueue("conf.finish", "conf.finish")
    one, two = await claim_one(ledger, first), await claim_one(ledger, second)

    finished = await ledger.finish(
        [Outcome.failed(one.fence, "later", delay=60), Outcome.failed(two.fence, "x", delay=0.5)]
    )

    assert sorted((f.id, f.status) for f in finished) == [(first, "pending"), (second, "pending")]


# -- whereabouts --------------------------------------------------------------------------


@ON_MARIADB
async def test_whereabouts_covers_live_and_history_and_omits_unknown_ids(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    pending, running, done, dead = enqueue("conf.w", "conf.w", "conf.w", "conf.w")
    await claim_one(ledger, running)
    done_task, dead_task = await claim_one(ledger, done), await claim_one(ledger, dead)
    await ledger.finish(
        [Outcome.succeeded(done_task.fence), Outcome.failed(dead_task.fence, "x", final=True)]
    )

    where = await ledger.whereabouts([pending, running, done, dead, 10**12, pending])

    assert where == {pending: "pending", running: "running", done: "succeeded", dead: "dead"}
    assert await ledger.whereabouts([]) == {}
