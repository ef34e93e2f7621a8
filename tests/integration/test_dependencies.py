"""Dependencies end to end (issue 27): a chain and a join through a real relay and
worker, a sync handler reading ``ctx.dependencies``; ``ledgerq show`` (table and
``--json``) and the dashboard's task page list dependencies and dependents;
``tasks cancel --cascade`` follows dependents."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import httpx

from ledgerq import Action, Registry, TaskContext, TaskFilter, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg import PgLedger
from tests.harness import Pipeline, enqueue_committed
from tests.support import ledgerq


def _registry() -> Registry:
    registry = Registry()

    @registry.task("dep.number")
    def number(payload: Any, ctx: TaskContext) -> int:
        return int(payload["n"])

    @registry.task("dep.sum")
    def total(payload: Any, ctx: TaskContext) -> dict[str, Any]:
        found = ctx.dependencies
        numbers = [v for v in found.values() if isinstance(v, int)]
        return {"sum": sum(numbers), "ids": sorted(found)}

    @registry.task("dep.spawner")
    def spawner(payload: Any, ctx: TaskContext) -> str:
        # a child that waits for its parent: released by the parent's own commit
        ctx.spawn("dep.sum", after=[ctx.id])
        return "spawned"

    return registry


async def test_a_join_runs_after_its_dependencies_with_their_results(
    settings: Settings,
) -> None:
    numbers = enqueue_committed(settings, [TaskSpec("dep.number", {"n": n}) for n in (1, 2, 3)])
    [join] = enqueue_committed(settings, [TaskSpec("dep.sum", after=numbers)])
    [chained] = enqueue_committed(settings, [TaskSpec("dep.sum", after=[join])])
    async with Pipeline(settings, _registry()) as pipe:
        statuses = await pipe.settle([*numbers, join, chained])
        assert set(statuses.values()) == {"succeeded"}
        assert (await pipe.ledger.show(join))["result"] == {"sum": 6, "ids": numbers}
        assert (await pipe.ledger.show(chained))["result"] == {"sum": 0, "ids": [join]}


async def test_a_spawned_task_may_wait_for_the_task_that_spawned_it(settings: Settings) -> None:
    [parent] = enqueue_committed(settings, [TaskSpec("dep.spawner")])
    async with Pipeline(settings, _registry()) as pipe:
        await pipe.settle([parent])
        [child] = [int(c["id"]) for c in await pipe.ledger.children(parent)]
        assert (await pipe.settle([child]))[child] == "succeeded"
        assert (await pipe.ledger.show(child))["result"] == {"sum": 0, "ids": [parent]}


async def test_show_and_the_dashboard_list_dependencies_and_dependents(
    settings: Settings, ledger: PgLedger
) -> None:
    [first, second] = enqueue_committed(settings, [TaskSpec("dep.a"), TaskSpec("dep.b")])
    [join] = enqueue_committed(settings, [TaskSpec("dep.c", after=[first, second])])

    table = ledgerq(settings, "show", str(join))
    assert table.returncode == 0, table.stderr
    assert f"{first} pending, {second} pending" in table.stdout
    assert "waiting" in table.stdout
    shown = json.loads(ledgerq(settings, "show", str(first), "--json").stdout)
    assert shown["dependents"] == [
        {"id": join, "kind": "dep.c", "status": "waiting", "always": False}
    ]
    assert shown["dependencies"] == []

    app = create_app(ledger, DashboardSettings())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as http:
        page = await http.get(f"/tasks/{join}")
        upstream = await http.get(f"/tasks/{first}")
    assert page.status_code == 200 and upstream.status_code == 200
    assert 'id="dependencies"' in page.text and f'href="/tasks/{first}"' in page.text
    assert f'href="/tasks/{second}"' in page.text
    assert page.text.count('class="status s-pending">pending</span>') >= 2  # both, with status
    # the other side: the dependency's page lists the join, waiting
    dependents = upstream.text.split('id="dependents"', 1)[1].split("</table>", 1)[0]
    assert f'href="/tasks/{join}"' in dependents and ">waiting</span>" in dependents


async def test_cancel_cascade_follows_dependents(settings: Settings, ledger: PgLedger) -> None:
    [root, other] = enqueue_committed(settings, [TaskSpec("dep.a"), TaskSpec("dep.a")])
    [plain, anyway] = enqueue_committed(
        settings,
        [
            TaskSpec("dep.b", after=[root]),
            TaskSpec("dep.b", after=[root], after_policy="always"),
        ],
    )
    [anyway_other] = enqueue_committed(
        settings, [TaskSpec("dep.b", after=[other], after_policy="always")]
    )
    done = ledgerq(settings, "tasks", "cancel", "--yes", "--cascade", str(root))
    assert done.returncode == 0, done.stdout + done.stderr
    without = ledgerq(settings, "tasks", "cancel", "--yes", str(other))
    assert without.returncode == 0, without.stdout + without.stderr
    assert await ledger.whereabouts([root, plain, anyway, other, anyway_other]) == {
        root: "cancelled",
        plain: "cancelled",  # by the ledger: its dependency was cancelled
        anyway: "cancelled",  # by the cascade (always would have run it)
        other: "cancelled",
        anyway_other: "pending",  # no cascade: always runs it
    }


async def test_operators_may_reprioritise_a_waiting_task_but_not_make_it_due(
    settings: Settings, ledger: PgLedger
) -> None:
    [dep] = enqueue_committed(settings, [TaskSpec("dep.a")])
    [waiting] = enqueue_committed(settings, [TaskSpec("dep.b", after=[dep])])
    selection = TaskFilter(ids=(waiting,))
    now = datetime.now(UTC)
    for action in (Action.reschedule(now), Action.retry()):
        report = await ledger.act(action, selection, actor="test")
        assert (report.changed, report.skipped) == (0, 1)
        assert any("dependencies" in reason for reason in report.reasons), report.reasons
    assert (await ledger.act(Action.set_priority(7), selection, actor="test")).changed == 1
    shown = await ledger.show(waiting)
    assert (shown["status"], shown["priority"]) == ("waiting", 7)
