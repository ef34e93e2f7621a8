"""A real browser for the dashboard's tests and screenshots: Debian's chromium,
driven by Playwright for Python through ``executable_path`` (never ``playwright
install``), and the dashboard served by uvicorn on a free port in this loop.

Without /usr/bin/chromium the tests fail with one line saying how to install it
(``scripts/test.sh`` installs it as root through ``ensure_test_servers``).
"""

from __future__ import annotations

import asyncio
import os
import socket
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import uvicorn
from playwright.async_api import BrowserContext, async_playwright

from ledgerq.dashboard.app import create_app
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.protocol import Ledger

CHROMIUM = os.environ.get("LEDGERQ_CHROMIUM", "/usr/bin/chromium")
ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
MISSING = (
    f"the dashboard's browser tests need Debian's chromium at {CHROMIUM}: "
    "apt-get install -y chromium (scripts/test.sh does it as root)"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@asynccontextmanager
async def chromium() -> AsyncIterator[BrowserContext]:
    """A headless chromium with a fresh profile; AssertionError if it is not installed."""
    assert os.access(CHROMIUM, os.X_OK), MISSING
    with tempfile.TemporaryDirectory(prefix="ledgerq-chromium-") as profile:
        async with async_playwright() as pw:
            context = await pw.chromium.launch_persistent_context(
                profile, executable_path=CHROMIUM, args=ARGS, headless=True,
                viewport={"width": 1400, "height": 900},
            )  # fmt: skip
            try:
                yield context
            finally:
                await context.close()


@asynccontextmanager
async def served(ledger: Ledger, settings: DashboardSettings) -> AsyncIterator[str]:
    """The dashboard on a free loopback port in this loop; yields its base URL."""
    port = free_port()
    config = uvicorn.Config(
        create_app(ledger, settings), host="127.0.0.1", port=port, log_config=None,
        access_log=False, lifespan="off",
    )  # fmt: skip
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        assert not task.done(), "the dashboard did not start"
        await asyncio.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
