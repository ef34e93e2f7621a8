"""The ``ledgerq`` command as a child process (``python -m ledgerq``), pointed at
the test's database, broker and AMQP prefix."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable

from ledgerq.core.config import Settings


def ledgerq_env(settings: Settings, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        LEDGERQ_DATABASE_URL=settings.database_url,
        LEDGERQ_AMQP_URL=settings.amqp_url,
        LEDGERQ_AMQP_PREFIX=settings.amqp_prefix,
        LEDGERQ_CONNECT_WAIT_S="1",
        PYTHONPATH=os.getcwd(),
    )
    env.update(extra)
    return env


def ledgerq(settings: Settings, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    """Run ``ledgerq ARGS`` to completion; ``extra`` overrides environment variables."""
    return subprocess.run(
        [sys.executable, "-m", "ledgerq", *args],
        env=ledgerq_env(settings, **extra),
        stdin=subprocess.DEVNULL,  # never a terminal: a command that would ask refuses
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def spawn(settings: Settings, *args: str) -> subprocess.Popen[str]:
    """``ledgerq ARGS`` as a child process, output captured (stderr into stdout)."""
    return subprocess.Popen(
        [sys.executable, "-m", "ledgerq", *args],
        env=ledgerq_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def until(
    what: str, check: Callable[[], bool | Awaitable[bool]], timeout: float = 30.0
) -> None:
    """Wait for ``check`` to hold (polled every 0.1 s); fail with ``what`` if it never does."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if not isinstance(result, bool):
            result = await result
        if result:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:.0f} s: {what}")
        await asyncio.sleep(0.1)
