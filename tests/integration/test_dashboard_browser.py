"""The dashboard in a real browser (headless chromium through Playwright): sign in
(a wrong password refused), the overview's charts drawn, which live worker serves
which shards, tasks waiting on others counted, filter, open a task whose
payload holds a ``<script>`` (shown as text, not run), cancel a task and see its
audit row, a bulk cancel counted before it is confirmed, a POST without the CSRF
token refused; and the command refusing 0.0.0.0 without authentication.

One browser, one seeded ledger and one server for the module (the tests share
them, in order), so the module takes seconds, not minutes.
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace

import pytest
import pytest_asyncio
from playwright.async_api import BrowserContext, Page, expect

from ledgerq import TaskSpec
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.routing import Subscription
from tests.browser import chromium, served
from tests.conftest import delete_broker_objects
from tests.dashboard_seed import Seeded, seed
from tests.harness import enqueue_committed

pytestmark = pytest.mark.asyncio(loop_scope="module")

USER, PASSWORD = "alice", "a long enough password"


@dataclass
class Dash:
    url: str
    ledger: PgLedger
    seeded: Seeded
    browser: BrowserContext
    page: Page


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def dash(base_settings: Settings) -> AsyncIterator[Dash]:
    settings = replace(base_settings, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")
    async with open_ledger(settings, "ledgerq-test-dashboard", pool_size=4) as ledger:
        await ledger.truncate()
        try:
            seeded = await seed(settings)
        finally:
            delete_broker_objects(settings)
        auth = DashboardSettings(password=PASSWORD, user=USER)
        async with served(ledger, auth) as url, chromium() as browser:
            page = await browser.new_page()
            yield Dash(url, ledger, seeded, browser, page)


async def test_a_wrong_password_is_refused_and_the_right_one_signs_in(dash: Dash) -> None:
    page = dash.page
    await page.goto(dash.url + "/")
    await expect(page).to_have_url(dash.url + "/login?next=%2F")
    await page.fill("input[name=user]", USER)
    await page.fill("input[name=password]", "not the password")
    await page.click("button[type=submit]")
    await expect(page.get_by_role("alert")).to_have_text("wrong user name or password")
    await page.fill("input[name=password]", PASSWORD)
    errors: list[str] = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    await page.click("button[type=submit]")
    await expect(page.locator("h1")).to_have_text("Overview")
    await expect(page.locator("#chart-throughput canvas")).to_have_count(1)
    await expect(page.locator("#chart-rate canvas")).to_have_count(1)
    await expect(page.locator(".tile.bad .n")).to_have_text(str(len(dash.seeded.ids["shop.sync"])))
    assert errors == []  # the Content-Security-Policy let the charts' own scripts run


async def test_the_overview_says_which_live_worker_serves_which_shards(dash: Dash) -> None:
    # Two --shards auto workers' split and a static worker, registered through the seam.
    split = {"web-1:11:ab12+auto.0001": {0, 2, 5}, "web-2:12:cd34+auto.0001": {1, 3, 4}}
    for worker, shards in split.items():
        await dash.ledger.subscribe(
            worker, [Subscription("default", shards=frozenset(shards))], ttl_s=300
        )
    await dash.ledger.subscribe("batch-1:13:ef56", [Subscription("other")], ttl_s=300)
    try:
        await dash.page.goto(dash.url + "/")
        card = dash.page.locator("#serving")
        for worker, shards in split.items():
            row = card.locator("tr", has_text=worker)
            await expect(row).to_contain_text(", ".join(map(str, sorted(shards))))
            await expect(row).to_contain_text("(auto")
        static = card.locator("tr", has_text="batch-1:13:ef56")
        await expect(static).to_contain_text("every shard")
        await expect(static).not_to_contain_text("(auto")
    finally:
        for worker in [*split, "batch-1:13:ef56"]:
            await dash.ledger.unsubscribe(worker)


async def test_filter_then_open_a_task_whose_payload_holds_a_script(dash: Dash) -> None:
    page = dash.page
    await page.goto(dash.url + "/tasks")
    await page.check("input[name=status][value=dead]")
    await page.fill("input[name=kind]", "shop.sync")
    await page.click("#filters button[type=submit]")
    ids = await page.locator("table.tasks tbody tr td:first-child a").all_inner_texts()
    assert sorted(map(int, ids)) == sorted(dash.seeded.ids["shop.sync"])
    await page.goto(f"{dash.url}/tasks/{dash.seeded.script_id}")
    await expect(page.locator("#payload")).to_contain_text(
        "<script>document.title='pwned'</script>"
    )
    assert await page.title() == f"Task {dash.seeded.script_id} · ledgerq"


async def test_cancel_one_task_and_see_its_audit_row(dash: Dash) -> None:
    page, target = dash.page, dash.seeded.ids["shop.report"][0]
    await page.goto(f"{dash.url}/tasks/{target}")
    await page.get_by_role("button", name="Cancel").click()
    await expect(page.locator(".flash")).to_contain_text("cancel: done")
    row = page.locator("#audit tbody tr")
    await expect(row).to_have_count(1)
    await expect(row).to_contain_text(f"dashboard:{USER}")
    await expect(row).to_contain_text("changed")
    assert (await dash.ledger.find(target))["status"] == "cancelled"


async def test_a_bulk_cancel_is_counted_before_it_is_confirmed(dash: Dash) -> None:
    page, waiting = dash.page, dash.seeded.ids["shop.report"][1:]
    await page.goto(f"{dash.url}/tasks?kind=shop.report&status=pending")
    await page.get_by_role("link", name="Cancel…").click()
    await expect(page.locator("#would-change")).to_have_text(str(len(waiting)))
    assert {(await dash.ledger.find(i))["status"] for i in waiting} == {"pending"}
    await page.fill("input[name=reason]", "reports paused")
    await page.get_by_role("button", name="Cancel them").click()
    await expect(page.locator("#report")).to_contain_text(f"{len(waiting)} changed")
    assert {(await dash.ledger.find(i))["status"] for i in waiting} == {"cancelled"}


async def test_a_post_without_the_csrf_token_is_refused(dash: Dash) -> None:
    target = dash.seeded.ids["shop.sync"][0]
    # The browser's own session cookie, but no token: refused, nothing changed.
    answer = await dash.page.request.post(f"{dash.url}/tasks/{target}/retry", form={})
    assert answer.status == 403
    assert (await dash.ledger.find(target))["status"] == "dead"


async def test_the_command_refuses_a_public_address_without_authentication() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGERQ_DASHBOARD_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "ledgerq", "dashboard", "--host", "0.0.0.0",
        env=env, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, stderr = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 78
    assert stderr.decode().strip().splitlines() == [
        "ledgerq: refusing to serve the dashboard on 0.0.0.0 without authentication: set "
        "LEDGERQ_DASHBOARD_PASSWORD or LEDGERQ_DASHBOARD_TOKEN (or bind 127.0.0.1)"
    ]


async def test_filter_by_tags_and_an_expired_tasks_page_says_so(
    dash: Dash, base_settings: Settings
) -> None:
    tagged, expired, _ = enqueue_committed(
        base_settings,
        [
            TaskSpec("shop.quote", tags=["tenant:7", "batch:3"], delay=3600),
            TaskSpec("shop.quote", tags=["tenant:7"], expires=3600),
            TaskSpec("shop.quote", tags=["tenant:8"], delay=3600),
        ],
    )
    await dash.ledger.backdate([expired], "expires_at", 1)  # simulate the hour passing
    assert await dash.ledger.expire_due(10) == [expired]
    page = dash.page
    await page.goto(dash.url + "/tasks")
    await page.fill("#filters input[name=tag]", "tenant:7")
    await page.click("#filters button[type=submit]")
    ids = await page.locator("table.tasks tbody tr td:first-child a").all_inner_texts()
    assert sorted(map(int, ids)) == [tagged, expired]
    await page.fill("#filters input[name=tag]", "tenant:7, batch:3")  # every tag must match
    await page.click("#filters button[type=submit]")
    ids = await page.locator("table.tasks tbody tr td:first-child a").all_inner_texts()
    assert list(map(int, ids)) == [tagged]

    await page.goto(f"{dash.url}/tasks/{expired}")
    await expect(page.locator("h1")).to_contain_text("expired")
    await expect(page.locator("dl.facts")).to_contain_text("expired: never started")
    await expect(page.locator("#audit tbody tr")).to_contain_text("expire")
    await page.locator("dl.facts .tags a", has_text="tenant:7").click()
    await expect(page.locator("#filters input[name=tag]")).to_have_value("tenant:7")


async def test_the_overview_counts_the_tasks_waiting_on_others(
    dash: Dash, base_settings: Settings
) -> None:
    [first] = enqueue_committed(base_settings, [TaskSpec("shop.join", queue="joins", delay=3600)])
    enqueue_committed(base_settings, [TaskSpec("shop.join", queue="joins", after=[first])])
    page = dash.page
    await page.goto(dash.url + "/")
    row = page.locator("table.grid tbody tr", has_text="shop.join")
    await expect(row.locator("td").last).to_have_text("1")  # the waiting column
    await expect(page.locator(".tile", has_text="waiting on others").locator(".n")).to_have_text(
        "1"
    )
