"""The operator's commands on a MariaDB ledger (issue 29), as a person runs them: a
child process on the test's MariaDB database, no terminal on stdin. ``ledgerq
stats``, ``show``, ``tasks list`` and ``tasks cancel|retry|...`` (confirmation,
dry run, audit record), ``kinds limit``, ``kinds list``, ``queues list`` and
``tasks release-key`` run there.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.routing import Subscription
from tests.support import ledgerq as run_ledgerq

EX_USAGE, EX_CONFIG = 64, 78
WORKER = "cli-test-worker"


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    """The MariaDB ledger, emptied (its audit trail too)."""
    opened = MyLedger(async_engine(mariadb_settings, "ledgerq-test-cli", pool_size=1))
    try:
        await opened.truncate()
        yield opened
    finally:
        await opened.dispose()


@pytest.fixture
def settings(mariadb_settings: Settings, ledger: MyLedger) -> Settings:
    """The commands' settings: the MariaDB ledger; no broker (nothing here needs one)."""
    return replace(mariadb_settings, amqp_url="amqp://guest:guest@127.0.0.1:1/")


@pytest.fixture
def producer(settings: Settings) -> Iterator[Engine]:
    engine = sync_engine(settings, "ledgerq-test-cli-producer", pool_size=1)
    yield engine
    engine.dispose()


def enqueued(producer: Engine, specs: list[TaskSpec]) -> list[int]:
    with Session(producer) as session, session.begin():
        return ledgerq.enqueue_many(session, specs)


def run_json(settings: Settings, *args: str) -> Any:
    done = run_ledgerq(settings, *args, "--json")
    assert done.returncode == 0, (args, done.stderr)
    return json.loads(done.stdout)


async def test_stats_show_and_list_read_the_mariadb_ledger(
    settings: Settings, ledger: MyLedger, producer: Engine
) -> None:
    ids = enqueued(
        producer,
        [TaskSpec("cli.a", business_key=f"order-{n}") for n in range(3)]
        + [TaskSpec("cli.b", {"x": [1, 2]}, queue="other", tags=["tenant:7"])],
    )
    await ledger.subscribe(WORKER, [Subscription("default", frozenset({"cli.a"}), capacity=5)], 60)
    [task] = await ledger.claim([(ids[0], 0)], WORKER, 30.0)
    await ledger.finish([Outcome.succeeded(task.fence, json.dumps({"ok": True}))])

    stats = run_json(settings, "stats")
    table = run_ledgerq(settings, "stats")
    shown = run_json(settings, "show", str(ids[3]))
    by_key = run_json(settings, "show", "--key", "order-0")
    everything = run_json(settings, "tasks", "list")
    first = run_json(settings, "tasks", "list", "--kind", "cli.a", "--limit", "2")
    second = run_json(
        settings, "tasks", "list", "--kind", "cli.a", "--before", str(first[-1]["id"])
    )
    done = run_json(settings, "tasks", "list", "--status", "succeeded")
    tagged = run_json(settings, "tasks", "list", "--tag", "tenant:7", "--queue", "other")

    assert (stats["total"], stats["by_status"]) == (4, {"pending": 3, "succeeded": 1})
    assert stats["by_kind"] == {"cli.a": {"pending": 2, "succeeded": 1}, "cli.b": {"pending": 1}}
    assert [(u["queue"], u["kind"], u["tasks"]) for u in stats["unserved"]] == [
        ("other", "cli.b", 1)
    ]
    assert [(w["worker"], w["queue"], w["kinds"]) for w in stats["workers"]] == [
        (WORKER, "default", ["cli.a"])
    ]
    [window] = stats["windows"]
    assert (window["queue"], window["capacity"], window["published"], window["room"]) == (
        "default",
        5,
        0,
        5,
    )
    assert table.returncode == 0 and "cli.a" in table.stdout, table.stderr
    assert (shown["id"], shown["payload"], shown["location"], shown["tags"]) == (
        ids[3],
        {"x": [1, 2]},
        "live",
        ["tenant:7"],
    )
    assert (shown["attempt_log"], shown["audit"]) == ([], [])
    assert (by_key["id"], by_key["status"], by_key["location"]) == (ids[0], "succeeded", "history")
    assert by_key["result"] == {"ok": True} and len(by_key["attempt_log"]) == 1
    assert [t["id"] for t in everything] == sorted(ids, reverse=True)
    assert [t["id"] for t in first + second] == sorted(ids[:3], reverse=True)
    assert [(t["id"], t["result"]) for t in done] == [(ids[0], {"ok": True})]
    assert [t["id"] for t in tagged] == [ids[3]]


async def test_cancel_confirms_acts_in_batches_and_is_audited_then_retry_revives(
    settings: Settings, ledger: MyLedger, producer: Engine
) -> None:
    ids = enqueued(producer, [TaskSpec("cli.c") for _ in range(3)])

    refused = run_ledgerq(settings, "tasks", "cancel", "--kind", "cli.c")
    dry = run_json(settings, "tasks", "cancel", "--kind", "cli.c", "--dry-run")
    untouched = await ledger.whereabouts(ids)
    done = run_json(
        settings, "tasks", "cancel", "--kind", "cli.c", "--yes", "--actor", "alice",
        "--reason", "provider down",
    )  # fmt: skip
    again = run_ledgerq(settings, "tasks", "cancel", str(ids[0]))
    audit = run_json(settings, "tasks", "audit", "--limit", "5")
    shown = run_json(settings, "show", str(ids[1]))
    retried = run_json(settings, "tasks", "retry", str(ids[1]), "--actor", "bob")

    assert refused.returncode == EX_USAGE and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "ledgerq: cancel matches 3 tasks; refusing without --yes (no terminal to confirm on)"
    ]
    assert (dry["matched"], dry["changed"], dry["dry_run"], dry["audit_id"]) == (3, 3, True, None)
    assert set(untouched.values()) == {"pending"}
    assert (done["matched"], done["changed"], done["skipped"]) == (3, 3, 0)
    assert done["audit_id"] is not None
    assert again.returncode == 0, again.stderr
    assert "cancel: matched 1, changed 0, skipped 1" in again.stdout
    assert "skipped 1: already cancelled" in again.stdout
    record = next(a for a in audit if a["id"] == done["audit_id"])
    assert (record["actor"], record["action"], record["reason"]) == (
        "alice",
        "cancel",
        "provider down",
    )
    assert (record["matched"], record["changed"], record["skipped"]) == (3, 3, 0)
    assert record["selection"] == {"kind": "cli.c"}
    assert (shown["status"], shown["location"]) == ("cancelled", "history")
    assert [(a["actor"], a["action"], a["outcome"]) for a in shown["audit"]] == [
        ("alice", "cancel", "changed")
    ]
    assert (retried["matched"], retried["changed"]) == (1, 1)
    assert await ledger.whereabouts(ids) == {
        ids[0]: "cancelled",
        ids[1]: "pending",
        ids[2]: "cancelled",
    }
    assert (await ledger.show(ids[1]))["epoch"] == 1  # a fresh life: its old messages claim nothing


async def test_a_limit_shows_in_kinds_and_a_key_nothing_holds_is_not_released(
    settings: Settings, ledger: MyLedger, producer: Engine
) -> None:
    [task_id] = enqueued(producer, [TaskSpec("cli.n", ordering_key="acct-1")])

    limited = run_json(settings, "kinds", "limit", "cli.n", "5/s")
    kinds = run_json(settings, "kinds", "list")
    paused = run_json(settings, "queues", "list")
    released = run_json(settings, "tasks", "release-key", "acct-1", "--yes")

    assert limited == {"kind": "cli.n", "rate_per_s": 5.0, "burst": 5.0}
    assert [(k["kind"], k["rate_per_s"], k["paused"], k["pending"]) for k in kinds] == [
        ("cli.n", 5.0, False, 1)
    ]
    assert paused == []
    assert (released["held"], released["waiting"], released["audit_id"]) == (False, 1, None)
    assert [a["action"] for a in await ledger.audit()] == ["set-limit"]
    assert await ledger.whereabouts([task_id]) == {task_id: "pending"}
