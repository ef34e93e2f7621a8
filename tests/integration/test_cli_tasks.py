"""``ledgerq tasks ...`` and ``ledgerq show`` as a person runs them: a child
process on the test's database, no terminal on stdin."""

from __future__ import annotations

import json
from typing import Any

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import enqueue_committed
from tests.support import ledgerq


def run_json(settings: Settings, *args: str) -> Any:
    done = ledgerq(settings, *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


async def test_list_filters_pages_and_prints_the_promised_fields(settings: Settings) -> None:
    ids = enqueue_committed(
        settings,
        [TaskSpec("cli.a", business_key=f"order-{n}") for n in range(3)]
        + [TaskSpec("cli.b", queue="other")],
    )

    everything = run_json(settings, "tasks", "list")
    first = run_json(settings, "tasks", "list", "--kind", "cli.a", "--limit", "2")
    second = run_json(
        settings, "tasks", "list", "--kind", "cli.a", "--before", str(first[-1]["id"])
    )
    by_key = run_json(settings, "tasks", "list", "--key", "order-1", "--since", "10m")
    other = run_json(settings, "tasks", "list", "--queue", "other", "--status", "pending")
    none = run_json(settings, "tasks", "list", "--until", "1h", "--status", "dead")
    table = ledgerq(settings, "tasks", "list", "--limit", "2")

    assert [t["id"] for t in everything] == sorted(ids, reverse=True)
    assert {
        "id", "kind", "queue", "status", "attempts", "max_attempts", "business_key", "run_at",
        "created_at", "finished_at", "last_error", "result",
    } <= set(everything[0])  # fmt: skip
    assert [t["id"] for t in first + second] == sorted(ids[:3], reverse=True)
    assert [t["id"] for t in by_key] == [ids[1]] and [t["id"] for t in other] == [ids[3]]
    assert none == []
    assert table.returncode == 0 and "cli.b" in table.stdout
    assert f"next page: --before {ids[2]}" in table.stdout


async def test_cancel_confirms_refuses_without_a_terminal_then_acts_and_is_audited(
    settings: Settings, ledger: PgLedger
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("cli.c") for _ in range(3)])

    refused = ledgerq(settings, "tasks", "cancel", "--kind", "cli.c")
    dry = run_json(settings, "tasks", "cancel", "--kind", "cli.c", "--dry-run")
    done = run_json(
        settings, "tasks", "cancel", "--kind", "cli.c", "--yes", "--actor", "alice",
        "--reason", "provider down",
    )  # fmt: skip
    again = ledgerq(settings, "tasks", "cancel", str(ids[0]))
    audit = run_json(settings, "tasks", "audit", "--limit", "5")

    assert refused.returncode == 64 and refused.stdout == ""
    assert refused.stderr.strip().splitlines() == [
        "ledgerq: cancel matches 3 tasks; refusing without --yes (no terminal to confirm on)"
    ]
    assert (dry["matched"], dry["changed"], dry["skipped"], dry["dry_run"]) == (3, 3, 0, True)
    assert (done["matched"], done["changed"], done["skipped"]) == (3, 3, 0)
    assert set((await ledger.whereabouts(ids)).values()) == {"cancelled"}
    assert again.returncode == 0, again.stderr
    assert "cancel: matched 1, changed 0, skipped 1" in again.stdout
    assert "skipped 1: already cancelled" in again.stdout
    assert [(a["actor"], a["action"], a["changed"]) for a in audit][-1] == ("alice", "cancel", 3)
    assert audit[-1]["reason"] == "provider down"
    assert audit[-1]["selection"] == {"kind": "cli.c"}


async def test_show_by_key_prints_attempts_and_audit_and_retry_reschedule_work(
    settings: Settings,
) -> None:
    [task_id] = enqueue_committed(settings, [TaskSpec("cli.s", business_key="inv-7", delay=600)])

    moved = run_json(settings, "tasks", "reschedule", str(task_id), "--in", "2h")
    prio = run_json(settings, "tasks", "set-priority", str(task_id), "--to", "5")
    shown = run_json(settings, "show", "--key", "inv-7")
    table = ledgerq(settings, "show", "--key", "inv-7")

    assert moved["changed"] == 1 and prio["changed"] == 1
    assert shown["id"] == task_id and shown["priority"] == 5 and shown["attempt_log"] == []
    assert [a["action"] for a in shown["audit"]] == ["reschedule", "set-priority"]
    assert table.returncode == 0
    assert "attempts: none ended yet" in table.stdout and "set-priority" in table.stdout


def test_bad_input_gets_one_line_and_exit_64(settings: Settings) -> None:
    cases = {
        ("tasks", "list", "--status", "finished"): "unknown status 'finished'",
        ("tasks", "list", "--since", "last tuesday"): "--since: cannot read 'last tuesday'",
        ("tasks", "cancel"): "cancel needs task ids or a filter",
        ("tasks", "reschedule", "1", "--in", "soon"): "--in: cannot read 'soon'",
        ("tasks", "set-attempts", "1", "--to", "0"): "max_attempts",
        ("show",): "give a task ID or --key",
        ("tasks", "list", "--tag", "a,b"): "tag: a tag may not contain a comma",
        ("tasks", "cancel", "--tag", "x" * 65): "at most 64 characters",
    }
    for args, message in cases.items():
        done = ledgerq(settings, *args)
        assert done.returncode == 64, (args, done.returncode, done.stderr)
        assert message in done.stderr, (args, done.stderr)
        assert "Traceback" not in done.stderr


async def test_tags_filter_list_and_actions_and_an_expired_task_says_so(
    settings: Settings, ledger: PgLedger
) -> None:
    both, one, _ = enqueue_committed(
        settings,
        [
            TaskSpec("cli.t", tags=["tenant:7", "batch:3"]),
            TaskSpec("cli.t", tags=["tenant:7"], expires=3600),
            TaskSpec("cli.t"),
        ],
    )
    await ledger.backdate([one], "expires_at", 1)
    assert await ledger.expire_due(10) == [one]

    tenant = run_json(settings, "tasks", "list", "--tag", "tenant:7")
    pair = run_json(settings, "tasks", "list", "--tag", "tenant:7", "--tag", "batch:3")
    dry = run_json(settings, "tasks", "cancel", "--tag", "batch:3", "--dry-run")
    table = ledgerq(settings, "tasks", "list", "--tag", "tenant:7", COLUMNS="200")
    shown = ledgerq(settings, "show", str(one), COLUMNS="200")

    assert [(t["id"], t["tags"]) for t in tenant] == [
        (one, ["tenant:7"]),
        (both, ["tenant:7", "batch:3"]),
    ]
    assert {t["id"]: (t["status"], t["expired"]) for t in tenant}[one] == ("cancelled", True)
    assert [t["id"] for t in pair] == [both]
    assert (dry["matched"], dry["changed"]) == (1, 1)
    assert table.returncode == 0 and "cancelled (expired)" in table.stdout
    assert "tenant:7,batch:3" in table.stdout
    assert shown.returncode == 0 and "cancelled (expired)" in shown.stdout
    assert "expired: not started by" in shown.stdout
