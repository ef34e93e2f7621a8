"""Pausing and resuming queues and kinds (issue 14) on the real ledger and broker.

Paused work stays in the ledger: the relay publishes none of it, what was
published and not yet claimed is taken back (its message claims nothing), the
reconciler does not stand in for the relay, a pause outlives the process that
took it, and every pause and resume is an audit record.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import psycopg

from ledgerq import Registry, TaskSpec
from ledgerq.compose import open_ledger
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from tests.harness import Pipeline, enqueue_committed, subscribe_like_worker, subscribe_queues
from tests.support import ledgerq


def counting_registry(runs: Counter[int]) -> Registry:
    registry = Registry()

    async def record(payload: dict[str, Any], ctx: Any) -> None:
        runs[ctx.task.id] += 1

    registry.task("t.a")(record)
    registry.task("t.b")(record)
    return registry


async def test_a_paused_queue_waits_in_the_ledger_until_resumed(
    settings: Settings, ledger: PgLedger
) -> None:
    runs: Counter[int] = Counter()
    report = await ledger.pause("queue", "other", actor="ops", reason="downstream down")
    assert (report.changed, report.unpublished) == (True, 0)
    held = enqueue_committed(settings, [TaskSpec("t.a", queue="other") for _ in range(3)])
    free = enqueue_committed(settings, [TaskSpec("t.a") for _ in range(3)])
    config = WorkerConfig(
        queues=("default", "other"), concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5
    )
    async with Pipeline(settings, counting_registry(runs), worker=config) as pipe:
        assert set((await pipe.settle(free)).values()) == {"succeeded"}
        for _ in range(3):
            await pipe.relay.run_once()
        assert set((await pipe.statuses(held)).values()) == {"pending"}
    # The pause is a row: a new connection (a restarted relay) sees it.
    async with open_ledger(settings, "ledgerq-other-process", pool_size=1) as other:
        assert [(p["scope"], p["name"], p["actor"]) for p in await other.pauses()] == [
            ("queue", "other", "ops")
        ]
        assert (await other.resume("queue", "other", actor="ops")).changed
    async with Pipeline(settings, counting_registry(runs), worker=config) as pipe:
        assert set((await pipe.settle(held)).values()) == {"succeeded"}
    assert runs == Counter({i: 1 for i in held + free})


async def test_pausing_takes_back_published_tasks_whose_messages_then_claim_nothing(
    settings: Settings, ledger: PgLedger
) -> None:
    runs: Counter[int] = Counter()
    registry = counting_registry(runs)
    config = WorkerConfig(concurrency=8, lease_s=30, heartbeat_s=5, grace_s=5)
    paused = enqueue_committed(settings, [TaskSpec("t.a") for _ in range(4)])
    other = enqueue_committed(settings, [TaskSpec("t.b") for _ in range(2)])
    async with Pipeline(settings, registry, start_worker=False) as pipe:
        # A stand-in for the worker below (its kinds: its route and broker queue), so
        # the relay publishes into the queue that worker will consume.
        await subscribe_like_worker(settings, pipe.ledger, registry, config)
        assert (await pipe.relay.run_once()).published == len(paused + other)
        assert set((await pipe.statuses(paused + other)).values()) == {"published"}
        await pipe.ledger.unsubscribe("test-subscriber")
    report = await ledger.pause("kind", "t.a", actor="ops")
    assert (report.changed, report.unpublished) == (True, 4)
    for task_id in paused:
        row = await ledger.show(task_id)
        assert (row["status"], row["epoch"]) == ("pending", 1)
    # A worker now receives every message: those of the four are stale and acked unrun.
    async with Pipeline(settings, registry, worker=config) as pipe:
        assert set((await pipe.settle(other)).values()) == {"succeeded"}
        await pipe.relay.run_once()
        assert set((await pipe.statuses(paused)).values()) == {"pending"}
        assert not runs.keys() & set(paused)
        await ledger.resume("kind", "t.a", actor="ops")
        assert set((await pipe.settle(paused)).values()) == {"succeeded"}
    assert runs == Counter({i: 1 for i in paused + other})
    # Each change is one audit record, naming what it touched.
    records = [(a["action"], a["selection"], a["actor"]) for a in await ledger.audit()]
    assert records == [("resume", {"kind": "t.a"}, "ops"), ("pause", {"kind": "t.a"}, "ops")]
    assert [a["action"] for a in (await ledger.find(paused[0]))["audit"]] == ["pause"]


async def test_pausing_twice_or_resuming_what_runs_changes_nothing_and_is_not_audited(
    ledger: PgLedger,
) -> None:
    assert (await ledger.pause("queue", "q1", actor="a")).changed
    again = await ledger.pause("queue", "q1", actor="b")
    assert (again.changed, again.audit_id) == (False, None)
    assert not (await ledger.resume("kind", "never.paused", actor="a")).changed
    assert [a["action"] for a in await ledger.audit()] == ["pause"]


async def test_the_reconciler_does_not_publish_overdue_paused_tasks(
    settings: Settings, ledger: PgLedger
) -> None:
    [paused, free] = enqueue_committed(settings, [TaskSpec("t.a", queue="other"), TaskSpec("t.a")])
    await ledger.pause("queue", "other", actor="ops")
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute("UPDATE ledgerq_tasks SET run_at = now() - interval '1 hour'")
    await subscribe_queues(ledger, "default", "other")  # live windows for both queues
    async with ledger.overdue_batch(100, 60) as batch:
        assert [r.id for r in batch.rows] == [free]
    await ledger.resume("queue", "other", actor="ops")
    async with ledger.overdue_batch(100, 60) as batch:
        assert [r.id for r in batch.rows] == [paused, free]


def test_the_cli_pauses_lists_and_resumes_with_json(settings: Settings) -> None:
    paused = ledgerq(settings, "queues", "pause", "emails", "--reason", "smtp down", "--json")
    assert paused.returncode == 0, paused.stderr
    report = json.loads(paused.stdout)
    assert (report["action"], report["changed"], report["scope"]) == ("pause", True, "queue")
    listed = json.loads(ledgerq(settings, "queues", "list", "--json").stdout)
    assert [(p["name"], p["reason"]) for p in listed] == [("emails", "smtp down")]
    resumed = json.loads(ledgerq(settings, "queues", "resume", "emails", "--json").stdout)
    assert (resumed["action"], resumed["changed"]) == ("resume", True)
    assert json.loads(ledgerq(settings, "queues", "list", "--json").stdout) == []
    limited = ledgerq(settings, "kinds", "limit", "t.charge", "20/s", "--json")
    assert limited.returncode == 0, limited.stderr
    assert json.loads(limited.stdout) == {"kind": "t.charge", "rate_per_s": 20.0, "burst": 20.0}
    assert ledgerq(settings, "kinds", "pause", "t.charge").returncode == 0
    [kind] = json.loads(ledgerq(settings, "kinds", "list", "--json").stdout)
    assert (kind["kind"], kind["rate_per_s"], kind["paused"], kind["pending"]) == (
        "t.charge",
        20.0,
        True,
        0,
    )
    wrong = ledgerq(settings, "kinds", "limit", "t.charge", "20/fortnight")
    assert (wrong.returncode, wrong.stderr.count("\n")) == (64, 1)
    bad = ledgerq(settings, "kinds", "pause", "no spaces")
    assert (bad.returncode, bad.stderr.count("\n")) == (64, 1)
    assert "malformed" in bad.stderr
