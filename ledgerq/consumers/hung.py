"""Sync handlers past their timeout: an attempt's code never overlaps its retry.

A thread cannot be stopped from outside. When a sync handler times out, the
worker flags its context (``ctx.lost``: a handler that looks can stop early)
and then waits for its thread: the task stays tracked by
:class:`~.leases.Leases` (the heartbeat keeps its lease), and its failure
outcome, which schedules the retry, goes to the finisher only once the thread
has returned. So no retry can be claimed anywhere while the attempt's code
still runs here. The same holds in a batched window (:mod:`.window`): the
window is abandoned, but the hung task's outcome waits for its thread.

A thread that never returns would hold its task (and a handler slot) forever.
:class:`HungThreads` arms a watchdog per timed-out thread: if it still runs
``limit_s`` after its timeout (``WorkerConfig.hang_limit_s``, ``ledgerq worker
--hang-limit``), the worker process ends at once, crash-only: one log line,
exit code :data:`EXIT_HUNG`, no drain and no outcome written. The thread dies
with the process, the heartbeat stops, the leases of everything the process
held lapse and the reconciler rescues those tasks under new epochs; the
orchestrator restarts the worker.

Races: the watchdog is a timer thread, not a callback on the event loop, so it
fires even if the loop is stuck. It is disarmed when the thread's future
completes (on the loop); a thread that returns in the instant the watchdog
fires may still end the process, which is harmless: either the outcome was not
written yet (the lease lapses, the task is retried) or it was, after the
thread had returned.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledgerq.ledger.model import ClaimedTask

log = logging.getLogger("ledgerq.worker")

#: The worker's exit code when a sync handler outlived its timeout by the hang
#: limit (EX_SOFTWARE: restart it).
EXIT_HUNG = 70


def crash(message: str) -> None:
    """End the process now, crash-only (``os._exit``: a normal exit would wait
    for the pool thread that never returns)."""
    log.critical(message)
    logging.shutdown()
    os._exit(EXIT_HUNG)


@dataclass
class HungThreads:
    """Watchdogs over timed-out sync handlers' threads (module docstring)."""

    #: Seconds a thread may run past its timeout before the process ends.
    limit_s: float = 60.0
    #: Called (from the watchdog's thread) with one line when a limit passes.
    on_hung: Callable[[str], None] = crash
    #: Timed-out threads still running.
    running: int = 0

    def watch(
        self, task: ClaimedTask, thread: asyncio.Future[Any], timed_out_at: float | None = None
    ) -> None:
        """Arm a watchdog over ``thread`` (the future of a handler that timed out at
        ``timed_out_at``, on ``time.monotonic``; default now), disarmed when it ends."""
        if thread.done():
            return
        since = time.monotonic() if timed_out_at is None else timed_out_at
        message = (
            f"task {task.id} ({task.kind}) attempt {task.attempts}: its sync handler still "
            f"runs {self.limit_s:g} s past its timeout; ending the worker (exit {EXIT_HUNG}) "
            "so that no retry overlaps it: its lease lapses and the reconciler retries it"
        )
        timer = threading.Timer(max(0.0, since + self.limit_s - time.monotonic()), self.on_hung)
        timer.args = (message,)
        timer.daemon = True
        timer.name = f"ledgerq-hung-{task.id}"
        timer.start()
        self.running += 1

        def returned(_: object) -> None:
            timer.cancel()
            self.running -= 1

        thread.add_done_callback(returned)
