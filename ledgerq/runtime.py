"""Process plumbing for the long-running services: the event loop and the stop signals.

The relay and workers spend much of their CPU in the event loop's socket
handling, which uvloop does in C; ``LEDGERQ_EVENT_LOOP=asyncio`` opts out.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_service(main: Coroutine[Any, Any, T]) -> T:
    """Run a service's coroutine on uvloop (or asyncio's own loop) and return its result."""
    if os.environ.get("LEDGERQ_EVENT_LOOP", "uvloop") == "asyncio":
        return asyncio.run(main)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


def on_stop_signal(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM or SIGINT (graceful shutdown)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)
