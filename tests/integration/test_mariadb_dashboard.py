"""The dashboard and its ledger gauges on a MariaDB ledger, in process: httpx against
the ASGI app over the ledger :func:`~ledgerq.compose.open_dashboard_ledger` opens
(``ledgerq dashboard``'s), and the metrics endpoint the dashboard serves with
``--metrics-port`` scraped over HTTP. The ledger is seeded through the seam (a
direct claim and a finish, as a worker writes them): no broker, no process.

What holds on MySQL as on PostgreSQL (tests/integration/test_dashboard_http.py):
the overview's figures (from history: there is no rollup, and the page says so),
the task list's filters, the task page (escaped), the actions with their CSRF
check and their audit rows, and the gauges' queue depth, oldest due age,
unserved backlog and broker windows."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import timedelta

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy.orm import Session

import ledgerq
from ledgerq import TaskSpec
from ledgerq.compose import open_dashboard_ledger
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.overview import overview_data
from ledgerq.dashboard.serve import ledger_metrics
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.rollup import WINDOWS, bucket_of
from ledgerq.ledger.routing import Subscription
from tests.mariadb_broker import query
from tests.pki import free_port
from tests.support import until

SCRIPT = "<script>document.title='pwned'</script>"
WORKER = "dash-worker"
CSRF = re.compile(r'name="csrf" value="([^"]+)"')
SYNC_ERROR = "ConnectionError: warehouse API: 503 upstream unavailable"
TRACEBACK = f'Traceback (most recent call last):\n  File "shop.py", line 9, in sync\n{SYNC_ERROR}\n'


@dataclass
class Shop:
    emails: list[int] = field(default_factory=list)
    syncs: list[int] = field(default_factory=list)
    reports: list[int] = field(default_factory=list)
    refunds: list[int] = field(default_factory=list)
    script_id: int = 0


def enqueue(settings: Settings, specs: list[TaskSpec]) -> list[int]:
    engine = sync_engine(settings, "ledgerq-test-dash-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            return ledgerq.enqueue_many(session, specs)
    finally:
        engine.dispose()


async def seed(settings: Settings, ledger: MyLedger) -> Shop:
    """Four emails succeeded and three syncs dead (by a worker's direct claim and
    finish); three reports scheduled an hour ahead; a pending email whose payload
    holds a script; two refunds due in ``other``, which no live worker serves."""
    shop = Shop()
    shop.emails = enqueue(settings, [TaskSpec("shop.email", {"to": i}) for i in range(4)])
    shop.syncs = enqueue(settings, [TaskSpec("shop.sync", {"order": i}) for i in range(3)])
    await ledger.alive(WORKER, 60.0)
    claimed = await ledger.claim_due(["default"], 100, WORKER, 30.0)
    assert len(claimed) == 7
    await ledger.finish(
        [
            Outcome.succeeded(t.fence)
            if t.kind == "shop.email"
            else Outcome.failed(t.fence, TRACEBACK, final=True)
            for t in claimed
        ]
    )
    shop.reports = enqueue(
        settings, [TaskSpec("shop.report", {"day": i}, delay=timedelta(hours=1)) for i in range(3)]
    )
    [shop.script_id] = enqueue(settings, [TaskSpec("shop.email", {"note": SCRIPT}, delay=3600)])
    shop.refunds = enqueue(settings, [TaskSpec("shop.refund", queue="other") for _ in range(2)])
    return shop


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    async with open_dashboard_ledger(mariadb_settings, "ledgerq-test-dash", 2) as opened:
        assert isinstance(opened, MyLedger)  # the dashboard's ledger on a MySQL URL
        await opened.truncate()
        yield opened


@pytest.fixture
async def shop(mariadb_settings: Settings, ledger: MyLedger) -> Shop:
    return await seed(mariadb_settings, ledger)


def client(ledger: MyLedger) -> httpx.AsyncClient:
    app = create_app(ledger, DashboardSettings())
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://testserver")


def csrf_of(page: httpx.Response) -> str:
    match = CSRF.search(page.text)
    assert match, "the page has no CSRF field"
    return match[1]


def listed(page: httpx.Response) -> set[int]:
    return set(map(int, re.findall(r'href="/tasks/(\d+)"', page.text)))


async def test_the_overview_reads_history_and_says_there_is_no_rollup(
    ledger: MyLedger, shop: Shop
) -> None:
    data = await overview_data(ledger, WINDOWS["1h"])
    assert data["finished"] == {"succeeded": 4, "dead": 3, "cancelled": 0}
    assert data["success_rate"] == pytest.approx(100 * 4 / 7)
    assert (data["totals"]["pending"], data["totals"]["due"]) == (6, 2)
    assert [(e["kind"], e["error"], e["n"]) for e in data["errors"]] == [
        ("shop.sync", SYNC_ERROR, 3)
    ]
    kinds = {k["kind"]: k for k in data["latency"]}
    assert kinds["shop.sync"]["hops"][-1]["n"] == 3  # total: created to finished
    [worker] = data["workers"]
    assert (worker["worker"], worker["finished_recently"]) == (WORKER, 7)
    assert {(u["queue"], u["kind"], u["tasks"]) for u in data["unserved"]} == {
        ("other", "shop.refund", 2)
    }
    assert data["rollup"] is False and data["rollup_lag_s"] is None
    async with client(ledger) as http:
        page = await http.get("/", params={"window": "7d"})
    assert page.status_code == 200
    assert "has no rollup" in page.text and "has never run" not in page.text
    assert SYNC_ERROR in page.text and WORKER in page.text


async def test_the_task_list_filters_and_the_task_page_escapes_its_payload(
    ledger: MyLedger, shop: Shop
) -> None:
    async with client(ledger) as http:
        dead = await http.get("/tasks", params={"status": "dead", "kind": "shop.sync"})
        assert listed(dead) == set(shop.syncs)
        by_error = await http.get("/tasks", params={"status": "dead", "error": "503 upstream"})
        assert listed(by_error) == set(shop.syncs)
        older = await http.get("/tasks", params={"before": shop.reports[2], "kind": "shop.report"})
        assert listed(older) == set(shop.reports[:2])
        bad = await http.get("/tasks", params={"status": "lost"})
        assert bad.status_code == 400 and "unknown status &#39;lost&#39;" in bad.text
        page = await http.get(f"/tasks/{shop.script_id}")
        assert page.status_code == 200
        assert "&lt;script&gt;document.title=" in page.text and SCRIPT not in page.text
        finished = await http.get(f"/tasks/{shop.syncs[0]}")
        assert finished.status_code == 200 and SYNC_ERROR in finished.text
        assert (await http.get("/tasks/999999999")).status_code == 404


async def test_actions_check_csrf_change_what_they_count_and_are_audited(
    ledger: MyLedger, shop: Shop
) -> None:
    target = shop.script_id
    async with client(ledger) as http:
        refused = await http.post(f"/tasks/{target}/cancel", data={})
        assert refused.status_code == 403
        assert (await ledger.find(target))["status"] == "pending"
        token = csrf_of(await http.get(f"/tasks/{target}"))
        done = await http.post(f"/tasks/{target}/cancel", data={"csrf": token})
        assert (
            done.status_code == 303
            and "cancel: done" in (await http.get(done.headers["location"])).text
        )

        preview = await http.get("/actions/cancel", params={"kind": "shop.report"})
        assert preview.status_code == 200 and re.search(r'id="would-change">3<', preview.text)
        assert {(await ledger.find(i))["status"] for i in shop.reports} == {"pending"}
        form = {"csrf": csrf_of(preview), "kind": "shop.report", "reason": "report paused"}
        bulk = await http.post("/actions/cancel", data=form)
        assert bulk.status_code == 200 and "<strong>3</strong> changed" in bulk.text
        retried = await http.post(f"/tasks/{shop.syncs[0]}/retry", data={"csrf": csrf_of(preview)})
        assert retried.status_code == 303
    assert [(a["actor"], a["action"]) for a in (await ledger.find(target))["audit"]] == [
        ("dashboard:local", "cancel")
    ]
    for task_id in shop.reports:
        task = await ledger.find(task_id)
        assert task["status"] == "cancelled"
        assert [(a["actor"], a["reason"]) for a in task["audit"]] == [
            ("dashboard:local", "report paused")
        ]
    assert (await ledger.find(shop.syncs[0]))["status"] == "pending"  # dead, retried


async def test_latency_buckets_agree_with_python(
    mariadb_settings: Settings, ledger: MyLedger
) -> None:
    durations = [0.0, 0.0004, 0.001, 0.0015, 0.25, 1.0, 59.9, 3600.0, 1e6]
    ids = enqueue(mariadb_settings, [TaskSpec("dash.lat") for _ in durations])
    claimed = await ledger.claim_due(["default"], 100, WORKER, 30.0)
    await ledger.finish([Outcome.succeeded(t.fence) for t in claimed])
    for task_id, seconds in zip(ids, durations, strict=True):  # each ran this long
        query(
            mariadb_settings,
            f"UPDATE ledgerq_history SET started_at = finished_at - INTERVAL "
            f"{round(seconds * 1_000_000)} MICROSECOND WHERE id = {task_id}",
        )
    since = await ledger.database_now() - timedelta(hours=1)
    rows = await ledger.latency(since, None)
    got = {r["bucket"]: r["n"] for r in rows if r["hop"] == "start_end"}
    expected: dict[int, int] = {}
    for seconds in durations:
        expected[bucket_of(seconds)] = expected.get(bucket_of(seconds), 0) + 1
    assert got == expected


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("ledgerq_")
    }


async def test_the_ledger_gauges_read_a_mariadb_ledger(ledger: MyLedger, shop: Shop) -> None:
    await ledger.backdate(shop.refunds, "run_at", 120)  # due for two minutes
    await ledger.subscribe(WORKER, [Subscription("default", capacity=5)], 600.0)
    port = free_port()
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

    async def refreshed() -> bool:  # the first refresh runs as the endpoint opens
        samples.update(await asyncio.to_thread(scrape, port))
        return ("ledgerq_due_tasks", (("queue", "other"),)) in samples

    async with ledger_metrics(ledger, port) as health:
        assert health is not None
        await until("the gauges read the ledger", refreshed, timeout=20)
    assert samples[("ledgerq_due_tasks", (("queue", "other"),))] == 2
    assert samples[("ledgerq_oldest_due_seconds", (("queue", "other"),))] >= 119
    assert samples[("ledgerq_tasks", (("queue", "default"), ("status", "pending")))] == 4
    unserved = (("kind", "shop.refund"), ("queue", "other"))
    assert samples[("ledgerq_unserved_tasks", unserved)] == 2
    assert samples[("ledgerq_unserved_oldest_seconds", unserved)] >= 119
    route = (("queue", "default"), ("route", ""))
    assert samples[("ledgerq_window_capacity", route)] == 5
    assert samples[("ledgerq_window_published", route)] == 0
