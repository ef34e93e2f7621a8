"""Unserved work and the broker windows where an operator looks, against the real
PostgreSQL: a task of a kind no live worker registers, next to a live worker
subscribed for another kind.

- ``ledgerq dashboard --metrics-port`` (a child process) names the kind in
  ``ledgerq_unserved_tasks`` with its one task, and the live route in
  ``ledgerq_window_capacity`` / ``ledgerq_window_published``; once a worker
  subscribes for the kind, the unserved gauge reads 0 (it does not vanish) and
  the new route's window appears.
- The overview page, in headless chromium, shows the kind in its "unserved"
  table and the route in its windows; once a worker subscribes for the kind the
  table is gone.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import httpx
from playwright.async_api import expect
from prometheus_client.parser import text_string_to_metric_families

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.routing import Subscription
from tests.browser import chromium, free_port, served
from tests.harness import enqueue_committed
from tests.support import ledgerq_env

NOBODY = "ledger.unserved_kind"
SERVED = "ledger.served_kind"
SERVES_OTHER = Subscription("default", kinds=frozenset({SERVED}), capacity=4)
SERVES_NOBODY = Subscription("default", kinds=frozenset({NOBODY}), capacity=2)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def unserved_key(name: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("kind", NOBODY), ("queue", "default")))


def window_key(name: str, sub: Subscription) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("queue", sub.queue), ("route", sub.route or "")))


async def arrange(settings: Settings, ledger: PgLedger) -> int:
    """One due task of a kind nobody registers; a live worker serving another kind."""
    [task_id] = enqueue_committed(settings, [TaskSpec(NOBODY, {"n": 1})])
    await ledger.subscribe("worker-a", [SERVES_OTHER], 600.0)
    assert [(r["kind"], r["tasks"]) for r in await ledger.unserved()] == [(NOBODY, 1)]
    return task_id


@asynccontextmanager
async def dashboard_process(settings: Settings) -> AsyncIterator[tuple[subprocess.Popen[str], int]]:
    """``ledgerq dashboard --metrics-port`` on loopback; yields it and its metrics port."""
    port, metrics = free_port(), free_port()
    env = ledgerq_env(settings)
    for name in [n for n in env if n.startswith("LEDGERQ_DASHBOARD_")]:
        del env[name]
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgerq", "dashboard", "--host", "127.0.0.1", "--port", str(port),
         "--metrics-port", str(metrics)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        yield proc, metrics
        proc.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(proc.communicate, timeout=30)
        assert proc.returncode == 0, output
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


async def scrape_until(
    proc: subprocess.Popen[str], port: int, ok: Callable[[Samples], bool], timeout: float = 45.0
) -> Samples:
    """Scrape ``/metrics`` until ``ok`` holds (the gauges refresh every 15 s)."""
    deadline = time.monotonic() + timeout
    samples: Samples = {}
    async with httpx.AsyncClient() as http:
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                answer = await http.get(f"http://127.0.0.1:{port}/metrics")
            except httpx.TransportError:
                pass
            else:
                assert answer.status_code == 200
                samples = {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(answer.text)
                    for s in family.samples
                    if s.name.startswith("ledgerq_")
                }
                if ok(samples):
                    return samples
            assert time.monotonic() < deadline, f"not reached in {timeout} s: {samples}"
            await asyncio.sleep(0.2)


async def test_the_gauges_name_an_unserved_kind_until_a_worker_serves_it(
    settings: Settings, ledger: PgLedger
) -> None:
    await arrange(settings, ledger)
    async with dashboard_process(settings) as (proc, port):
        tasks = unserved_key("ledgerq_unserved_tasks")
        first = await scrape_until(proc, port, lambda s: tasks in s)
        assert first[tasks] == 1.0
        assert 0.0 <= first[unserved_key("ledgerq_unserved_oldest_seconds")] < 120.0
        assert first[window_key("ledgerq_window_capacity", SERVES_OTHER)] == 4.0
        assert first[window_key("ledgerq_window_published", SERVES_OTHER)] == 0.0
        # The kind the live worker serves is not unserved: no series for it.
        assert not any(n == "ledgerq_unserved_tasks" and ("kind", SERVED) in labels
                       for n, labels in first)  # fmt: skip
        # The existing gauges are there as before.
        assert first[("ledgerq_due_tasks", (("queue", "default"),))] == 1.0

        await ledger.subscribe("worker-b", [SERVES_NOBODY], 600.0)
        later = await scrape_until(proc, port, lambda s: s.get(tasks) == 0.0)
        assert later[unserved_key("ledgerq_unserved_oldest_seconds")] == 0.0
        assert later[window_key("ledgerq_window_capacity", SERVES_NOBODY)] == 2.0
        assert later[window_key("ledgerq_window_capacity", SERVES_OTHER)] == 4.0


async def test_the_overview_shows_the_unserved_table_until_a_worker_serves_the_kind(
    settings: Settings, ledger: PgLedger
) -> None:
    await arrange(settings, ledger)
    async with served(ledger, DashboardSettings()) as url, chromium() as browser:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        await page.goto(url + "/")
        table = page.locator("#unserved")
        await expect(table).to_contain_text("never attempted")
        rows = table.locator("tbody tr")
        await expect(rows).to_have_count(1)
        cells = await rows.first.locator("td").all_inner_texts()
        assert cells[:4] == ["default", NOBODY, "0", "1"], cells
        windows = page.locator("#broker-windows tbody tr")
        await expect(windows).to_have_count(1)
        assert await windows.first.locator("td").all_inner_texts() == [
            "default", SERVES_OTHER.route, "4", "0",
        ]  # fmt: skip

        await ledger.subscribe("worker-b", [SERVES_NOBODY], 600.0)
        await page.reload()
        await expect(page.locator("h1")).to_have_text("Overview")
        await expect(page.locator("#unserved")).to_have_count(0)
        await expect(windows).to_have_count(2)
        assert errors == []
