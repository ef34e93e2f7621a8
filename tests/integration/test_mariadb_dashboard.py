"""The dashboard and its ledger gauges on a MariaDB ledger, in process: httpx against
the ASGI app over the ledger :func:`~ledgerq.compose.open_dashboard_ledger` opens
(``ledgerq dashboard``'s), and the metrics endpoint the dashboard serves with
``--metrics-port`` scraped over HTTP. The ledger is seeded through the seam (a
direct claim and a finish, as a worker writes them): no broker, no process.

What holds on MySQL as on PostgreSQL (tests/integration/test_dashboard_http.py):
the overview's figures, from history until the rollup runs (the page says it has
never run) and from the rollup and history's fresh tail after, the same either
way; the rollup's rule for a finish that commits late, and a finish committed
while a step runs counted once; the task list's filters, the task page
(escaped), the actions with their CSRF check and their audit rows, and the
gauges' queue depth, oldest due age, unserved backlog and broker windows."""

from __future__ import annotations

import asyncio
import re
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import httpx
import pymysql
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import make_url
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
from ledgerq.relay.rollup import Rollup, RollupConfig
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


async def test_the_overview_reads_history_until_the_rollup_runs(
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
    assert data["rollup"] is True and data["rollup_lag_s"] is None  # never ran
    async with client(ledger) as http:
        page = await http.get("/", params={"window": "7d"})
    assert page.status_code == 200
    assert "has never run" in page.text and "has no rollup" not in page.text
    assert SYNC_ERROR in page.text and WORKER in page.text


async def test_the_overview_is_the_same_from_the_rollup_as_from_history(
    mariadb_settings: Settings, ledger: MyLedger, shop: Shop
) -> None:
    # Age the finished tasks by five minutes, so whole minutes are there to roll up.
    query(
        mariadb_settings,
        "UPDATE ledgerq_history SET created_at = created_at - INTERVAL 5 MINUTE, "
        "run_at = run_at - INTERVAL 5 MINUTE, "
        "published_at = published_at - INTERVAL 5 MINUTE, "
        "started_at = started_at - INTERVAL 5 MINUTE, "
        "finished_at = finished_at - INTERVAL 5 MINUTE",
    )
    # The same figures from history alone and from the rollup (its minute rows for
    # the hour's window, its hour rows for the week's).
    now = datetime.now(UTC)
    windows = (WINDOWS["1h"], WINDOWS["7d"])
    before = [await overview_data(ledger, w, now) for w in windows]
    assert before[0]["finished"] == {"succeeded": 4, "dead": 3, "cancelled": 0}
    rollup = Rollup(ledger, RollupConfig(settle_s=60, backfill_s=3600))
    first = await rollup.run_once()
    assert (first.tasks, first.caught_up) == (7, True) and first.rows > 0
    again = await rollup.run_once()
    assert again.tasks == 0
    after = [await overview_data(ledger, w, now) for w in windows]
    for old, new in zip(before, after, strict=True):
        for key in ("finished", "success_rate", "series", "latency"):
            assert new[key] == old[key], (new["window"], key)
    assert after[0]["errors"] == before[0]["errors"]
    assert after[0]["rollup_lag_s"] is not None and after[0]["rollup_lag_s"] < 130
    assert counted(mariadb_settings) == {"minute": 7, "hour": 7}
    async with client(ledger) as http:
        page = await http.get("/")
    assert "has never run" not in page.text and "has no rollup" not in page.text
    # The testing protocol's truncate empties the rollup and clears its mark.
    await ledger.truncate()
    assert await ledger.rolled_upto() is None and counted(mariadb_settings) == {}


def counted(settings: Settings) -> dict[str, int]:
    """The finished tasks the rollup's count rows hold, per grain."""
    rows = query(settings, "SELECT grain, SUM(n) FROM ledgerq_rollup_counts GROUP BY grain")
    return {str(grain): int(n) for grain, n in rows}


async def test_a_late_commit_is_never_counted_and_one_during_a_step_is_counted_once(
    mariadb_settings: Settings, ledger: MyLedger
) -> None:
    """The finish writes finished_at at its statement's start and commits after: a
    row committed behind the mark is never counted (PostgreSQL's rule: settle_s is
    the commit lag allowed), one committed after a step read history is counted by
    a later step, once; the step waits for neither."""
    [template] = enqueue(mariadb_settings, [TaskSpec("dash.race")])
    [claimed] = await ledger.claim_due(["default"], 10, WORKER, 30.0)
    await ledger.finish([Outcome.succeeded(claimed.fence)])
    query(
        mariadb_settings,
        "UPDATE ledgerq_history SET finished_at = finished_at - INTERVAL 10 MINUTE "
        f"WHERE id = {template}",
    )
    settle = {"settle_s": 60.0, "max_span_s": 86_400.0, "backfill_s": 3600.0}
    first = await ledger.roll_up(**settle)
    assert first.tasks == 1 and first.rolled_upto is not None
    mark = first.rolled_upto.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")

    # Two finishes in flight (copies of the template's history row): one that
    # finished before the mark, one half a minute ago.
    url = make_url(mariadb_settings.database_url)
    tx = pymysql.connect(
        host=url.host or "127.0.0.1", port=url.port or 3306, user=url.username or "root",
        password=url.password or "", database=url.database, autocommit=False,
    )  # fmt: skip
    try:
        with tx.cursor() as cursor:
            cursor.execute(
                "CREATE TEMPORARY TABLE lq_copy AS "
                f"SELECT * FROM ledgerq_history WHERE id = {template}"
            )
            for copy, finished in (
                (-1, f"TIMESTAMP('{mark}') - INTERVAL 30 SECOND"),  # late: behind the mark
                (-2, "UTC_TIMESTAMP(6) - INTERVAL 30 SECOND"),
            ):
                cursor.execute(f"UPDATE lq_copy SET id = {copy}, finished_at = {finished}")
                cursor.execute("INSERT INTO ledgerq_history SELECT * FROM lq_copy")
            # A step while they are uncommitted: it sees neither and waits for neither.
            during = await asyncio.wait_for(ledger.roll_up(**settle), timeout=30)
            assert during.tasks == 0
        tx.commit()
    finally:
        tx.close()

    since = await ledger.database_now() - timedelta(hours=1)
    mark_now = await ledger.rolled_upto()
    assert mark_now is not None
    tail = await ledger.throughput(since, 60.0, mark_now)
    assert sum(r["n"] for r in tail) == 2  # the template (rollup) and -2 (tail), not -1
    # A mark two minutes ahead (a settle_s of -120: a test's) takes in everything.
    later = await ledger.roll_up(settle_s=-120.0, max_span_s=86_400.0, backfill_s=3600.0)
    assert later.tasks == 1  # -2, once; -1 stays behind the mark
    upto = await ledger.rolled_upto()
    rolled = await ledger.throughput(since, 60.0, upto)
    assert sum(r["n"] for r in rolled) == 2
    assert sum(r["n"] for r in await ledger.throughput(since, 60.0, None)) == 3  # history's


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
