"""The dashboard's rollup and what its overview and task pages read, on every
single-database implementation."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from ledgerq import TaskSpec
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.protocol import LedgerWithHarness
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE
from tests.conformance.support import LEASE_S, WORKER, Enqueue, publish

IMPLEMENTATIONS = ONE_DATABASE


async def finish_some(ledger: LedgerWithHarness, enqueue: Enqueue) -> list[int]:
    """Two succeeded and one dead task of "conf.v", finished by WORKER."""
    ids = enqueue("conf.v", "conf.v", "conf.v")
    await publish(ledger)
    won = await ledger.claim([(i, 0) for i in ids], WORKER, LEASE_S)
    fences = {t.id: t.fence for t in won}
    await ledger.finish(
        [
            Outcome.succeeded(fences[ids[0]]),
            Outcome.succeeded(fences[ids[1]]),
            Outcome.failed(fences[ids[2]], "ValueError: bad input", final=True),
        ]
    )
    return ids


@ON_MARIADB
async def test_the_rollup_counts_settled_finishes_and_prunes_old_rows(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    assert await ledger.rolled_upto() is None  # never ran since the ledger was emptied
    await finish_some(ledger, enqueue)

    step = await ledger.roll_up(settle_s=0.0, max_span_s=86_400.0, backfill_s=3600.0)

    assert step.rolled_upto is not None and await ledger.rolled_upto() == step.rolled_upto
    assert await ledger.prune_rollup(keep_s=86_400.0) == 0  # nothing that old
    assert await ledger.prune_rollup(keep_s=0.0) >= 0


async def figures(
    ledger: LedgerWithHarness, since: datetime, step_s: float, upto: datetime | None, grain: str
) -> list[list[dict[str, Any]]]:
    """What the overview reads over time since ``since``: throughput, latency buckets
    and dead errors (their ``last_at`` left out: the hour grain's is the hour)."""
    errors = await ledger.dead_errors(since, upto, grain)
    return [
        await ledger.throughput(since, step_s, upto, grain),
        await ledger.latency(since, upto, grain),
        [{k: v for k, v in e.items() if grain == "minute" or k != "last_at"} for e in errors],
    ]


@ON_MARIADB
async def test_the_rollup_reads_as_history_does_in_minutes_and_hours(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    await finish_some(ledger, enqueue)
    now = await ledger.database_now()
    windows = [  # the 1 h window's minutes, and hours as the 7 d window reads them
        (now.replace(second=0, microsecond=0) - timedelta(hours=1), 60.0, "minute"),
        (now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=1), 3600.0, "hour"),
    ]
    exact = [await figures(ledger, since, step, None, grain) for since, step, grain in windows]
    assert [sum(r["n"] for r in throughput) for throughput, _, _ in exact] == [3, 3]

    # A mark two minutes ahead (a settle_s of -120, which only a test passes): every
    # finished task is the rollup's to count, none is left to the fresh tail.
    step = await ledger.roll_up(settle_s=-120.0, max_span_s=86_400.0, backfill_s=3600.0)
    assert (step.tasks, step.caught_up) == (3, True) and step.rows >= 2 * (2 + 4)
    upto = await ledger.rolled_upto()
    assert upto is not None and upto > now
    again = await ledger.roll_up(settle_s=-120.0, max_span_s=86_400.0, backfill_s=3600.0)
    assert (again.tasks, again.rows) == (0, 0)  # counted once
    assert again.rolled_upto is not None and again.rolled_upto >= upto  # a minute on, at most

    rolled = [await figures(ledger, since, step, upto, grain) for since, step, grain in windows]
    assert rolled == exact


@ON_MARIADB
async def test_throughput_latency_and_dead_errors_read_history(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    await finish_some(ledger, enqueue)
    since = (await ledger.database_now() - timedelta(hours=1)).replace(microsecond=0)

    bins = await ledger.throughput(since, 60.0, None)
    assert {r["status"]: 0 for r in bins} == {"succeeded": 0, "dead": 0}
    assert sum(r["n"] for r in bins if r["status"] == "succeeded") == 2
    for row in bins:  # each bin starts a whole step after since, in UTC
        at = datetime.fromisoformat(row["at"])
        assert at.utcoffset() == timedelta(0) and (at - since).total_seconds() % 60 == 0
    latency = [r for r in await ledger.latency(since, None) if r["kind"] == "conf.v"]
    assert {r["hop"] for r in latency} == {"due_publish", "publish_start", "start_end", "total"}
    assert sum(r["n"] for r in latency if r["hop"] == "total") == 3
    [error] = await ledger.dead_errors(since, None)
    assert (error["kind"], error["n"], error["error"]) == ("conf.v", 1, "ValueError: bad input")
    [seen] = [w for w in await ledger.workers() if w["worker"] == WORKER]
    assert (seen["running"], seen["finished_recently"], seen["queues"]) == (0, 3, ["default"])


@ON_MARIADB
async def test_live_counts_tell_due_from_scheduled_with_the_oldest_due_age(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    due, running, _ = enqueue("conf.due", "conf.due", TaskSpec("conf.due", delay=3600))
    await ledger.backdate([due], "run_at", 120)  # due for two minutes
    await ledger.claim([(running, 0)], WORKER, LEASE_S)

    [counts] = [r for r in await ledger.live_counts() if r["kind"] == "conf.due"]
    assert (counts["pending"], counts["due"], counts["scheduled"]) == (2, 1, 1)
    assert (counts["published"], counts["running"], counts["waiting"]) == (0, 1, 0)
    assert 119 <= counts["oldest_due_s"] < 600
    [seen] = [w for w in await ledger.workers() if w["worker"] == WORKER]
    assert (seen["running"], seen["running_kinds"]) == (1, ["conf.due"])
    assert seen["lease_until"] is not None


async def test_live_counts_and_workers_show_whats_waiting_and_who_runs_it(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    pending, running = enqueue("conf.live", "conf.live")
    await ledger.claim([(running, 0)], WORKER, LEASE_S)
    enqueue(TaskSpec("conf.live", after=(pending,)))  # waits for the pending one

    [counts] = [r for r in await ledger.live_counts() if r["kind"] == "conf.live"]
    assert (counts["pending"], counts["running"], counts["waiting"]) == (1, 1, 1)
    assert WORKER in {r["worker"] for r in await ledger.workers()}
    assert await ledger.whereabouts([pending]) == {pending: "pending"}


async def test_children_lists_the_tasks_a_task_enqueued(
    ledger: LedgerWithHarness, enqueue: Enqueue
) -> None:
    [parent] = enqueue("conf.parent")
    kids = enqueue(TaskSpec("conf.kid", parent_id=parent), TaskSpec("conf.kid", parent_id=parent))

    rows = await ledger.children(parent)

    assert [r["id"] for r in rows] == sorted(kids, reverse=True)  # newest first
    assert await ledger.children(parent, limit=1) == rows[:1]
