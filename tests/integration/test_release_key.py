"""``ledgerq tasks release-key KEY``: an operator lets an ordering key move on past
the dead task of an ``ordering="block"`` kind that holds it.

The task stays dead in history; its death is recorded as released (migration
0015, fenced by its epoch) and audited, and the key's next task runs. The
retry-then-cancel the docs used to suggest raced the relay (the retry published
the task at once, it died again, and the cancel found it "already dead").
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ledgerq import Action, Registry, TaskContext, TaskFilter, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from tests.harness import Pipeline, enqueue_committed, subscribe_queues
from tests.support import ledgerq


def _registry(ran: list[int]) -> Registry:
    registry = Registry()

    @registry.task("t.block", ordering="block")
    def block(payload: Any, ctx: TaskContext) -> None:
        raise RuntimeError("poison")

    @registry.task("t.after")
    def after(payload: Any, ctx: TaskContext) -> None:
        ran.append(ctx.id)

    return registry


async def test_a_released_key_runs_its_next_task_and_the_release_is_audited(
    settings: Settings, ledger: PgLedger
) -> None:
    ran: list[int] = []
    first, second = enqueue_committed(
        settings,
        [
            TaskSpec("t.block", ordering_key="acct-1", max_attempts=1),
            TaskSpec("t.after", ordering_key="acct-1"),
        ],
    )
    async with Pipeline(settings, _registry(ran)) as pipe:
        assert await pipe.settle([first]) == {first: "dead"}
        for _ in range(5):  # held: the relay publishes nothing of the key
            await pipe.relay.run_once()
            await asyncio.sleep(0.05)
        assert await pipe.statuses([second]) == {second: "pending"}

        done = ledgerq(
            settings, "tasks", "release-key", "acct-1", "--yes", "--json", "--reason", "refunded"
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["released"] == [first] and report["waiting"] == 1 and report["held"]

        assert await pipe.settle([second]) == {second: "succeeded"}
    assert ran == [second]
    assert await ledger.whereabouts([first]) == {first: "dead"}  # it stays as it ended

    [record] = json.loads(ledgerq(settings, "tasks", "audit", "--json").stdout)[:1]
    assert record["id"] == report["audit_id"] and record["action"] == "release-key"
    assert record["selection"] == {"ordering_key": "acct-1"}
    assert record["reason"] == "refunded" and (record["matched"], record["changed"]) == (1, 1)
    shown = json.loads(ledgerq(settings, "show", str(first), "--json").stdout)
    assert [(a["action"], a["outcome"]) for a in shown["audit"]] == [("release-key", "changed")]

    again = ledgerq(settings, "tasks", "release-key", "acct-1", "--yes")
    assert again.returncode == 0, again.stderr
    assert "is not held" in again.stdout  # nothing left to release: no second record
    newest = json.loads(ledgerq(settings, "tasks", "audit", "--json").stdout)[0]
    assert newest["id"] == report["audit_id"]


async def due(ledger: PgLedger) -> list[int]:
    """What a relay batch publishes now (marked published)."""
    await subscribe_queues(ledger, "default")
    async with ledger.publish_batch(100) as batch:
        return sorted(await batch.mark_published(batch.rows))


async def test_a_release_is_fenced_by_epoch_so_a_new_death_holds_the_key_again(
    settings: Settings, ledger: PgLedger
) -> None:
    registry = _registry([])
    await ledger.register_ordering(registry.orderings())
    first, second = enqueue_committed(
        settings, [TaskSpec("t.block", ordering_key="k"), TaskSpec("t.after", ordering_key="k")]
    )

    async def dies(task_id: int, epoch: int) -> None:
        assert await due(ledger) == [task_id]
        [run] = await ledger.claim([(task_id, epoch)], "w", 30)
        await ledger.finish([Outcome.failed(run.fence, "boom", final=True)])

    await dies(first, 0)
    assert await due(ledger) == []
    dry = await ledger.release_key("k", actor="ops", dry_run=True)
    assert (dry.released, dry.audit_id) == ([first], None)
    assert await due(ledger) == []  # a dry run writes nothing
    # An operator retries it after all, and it dies again under a new epoch: the
    # release taken before that death does not cover it.
    released = await ledger.release_key("k", actor="ops")
    assert released.released == [first] and released.audit_id is not None
    await ledger.act(Action.retry(), TaskFilter(ids=(first,)), actor="ops")
    await dies(first, 2)
    assert await due(ledger) == []
    assert (await ledger.release_key("k", actor="ops")).released == [first]
    assert await due(ledger) == [second]


async def test_release_key_asks_first_and_an_unknown_key_is_one_line(
    settings: Settings, ledger: PgLedger
) -> None:
    await ledger.register_ordering(_registry([]).orderings())
    [task_id] = enqueue_committed(settings, [TaskSpec("t.block", ordering_key="held")])
    await subscribe_queues(ledger, "default")
    async with ledger.publish_batch(10) as batch:
        await batch.mark_published(batch.rows)
    [run] = await ledger.claim([(task_id, 0)], "w", 30)
    await ledger.finish([Outcome.failed(run.fence, "boom", final=True)])

    refused = ledgerq(settings, "tasks", "release-key", "held")  # no terminal, no --yes
    assert refused.returncode == 64, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "ledgerq: release-key 'held' is held by 1 dead tasks; refusing without --yes "
        "(no terminal to confirm on)"
    ]
    dry = ledgerq(settings, "tasks", "release-key", "held", "--dry-run")
    assert dry.returncode == 0 and "would release 1 dead" in dry.stdout, dry
    assert (await ledger.release_key("held", actor="t", dry_run=True)).released == [task_id]

    unknown = ledgerq(settings, "tasks", "release-key", "nope", "--yes")
    assert unknown.returncode == 1, unknown.stderr
    assert unknown.stderr.strip() == "ledgerq: no live or dead task has ordering key 'nope'"
    bad = ledgerq(settings, "tasks", "release-key", "x" * 600, "--yes")
    assert bad.returncode == 64 and "ordering key must be" in bad.stderr, bad.stderr
    try:
        await ledger.release_key("nope", actor="t")
    except TaskNotFoundError as exc:
        assert "nope" in str(exc)
    else:
        raise AssertionError("an unknown key must raise TaskNotFoundError")
