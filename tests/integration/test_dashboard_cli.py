"""``ledgerq dashboard`` as a process: it serves with a token on a public address,
serves the ledger's gauges on its metrics port, and stops on SIGTERM with exit 0."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import httpx

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests.browser import free_port
from tests.harness import enqueue_committed
from tests.support import ledgerq_env

TOKEN = "a-token-of-twenty-four-ch"


async def wait_for(url: str, proc: subprocess.Popen[str], **headers: str) -> httpx.Response:
    deadline = time.monotonic() + 30
    async with httpx.AsyncClient() as http:
        while True:
            assert proc.poll() is None, proc.communicate()[0]
            try:
                return await http.get(url, headers=headers)
            except httpx.TransportError:
                assert time.monotonic() < deadline, f"{url} never answered"
                await asyncio.sleep(0.1)


async def test_it_serves_its_gauges_and_stops_on_sigterm(settings: Settings) -> None:
    enqueue_committed(settings, [TaskSpec("cli.due"), TaskSpec("cli.due", queue="other")])
    port, metrics = free_port(), free_port()
    env = ledgerq_env(settings, LEDGERQ_DASHBOARD_TOKEN=TOKEN)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgerq", "dashboard", "--host", "0.0.0.0", "--port", str(port),
         "--metrics-port", str(metrics)],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        page = await wait_for(
            f"http://127.0.0.1:{port}/tasks", proc, authorization=f"Bearer {TOKEN}"
        )
        assert page.status_code == 200 and "cli.due" in page.text
        away = await wait_for(f"http://127.0.0.1:{port}/tasks", proc)
        assert away.status_code == 303 and away.headers["location"] == "/login?next=%2Ftasks"
        gauges = (await wait_for(f"http://127.0.0.1:{metrics}/metrics", proc)).text
        assert 'ledgerq_due_tasks{queue="default"} 1.0' in gauges
        assert 'ledgerq_tasks{queue="other",status="pending"} 1.0' in gauges
        assert (await wait_for(f"http://127.0.0.1:{metrics}/readyz", proc)).text == "ready\n"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, output
    assert TOKEN not in output
