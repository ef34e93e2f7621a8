"""Dead-task alerts: called once for every task that ends ``dead``.

Every death is logged (one ERROR line, :func:`log_alert`). Besides it, any of
the channels of :mod:`ledgerq.alerting` (a webhook, email over SMTP, a
callable named by a dotted path), each configured by settings and built by the
composition root (:func:`ledgerq.compose.alert_hook`). :func:`fan_out` makes one
hook of them: the log line, then every channel at once.

A failing channel is logged and retried, with a bound: at most
:data:`ALERT_ATTEMPTS` attempts, :data:`ALERT_BACKOFF_S` apart, all within the
alert's total deadline. A channel that raises :class:`AlertRefused` (a redirect,
a 4xx, a mailbox the server refuses, a login it rejects) is not retried:
sending the same thing again would get the same answer.

Alerts never hold a service up. :class:`AlertSender` runs them in the
background: at most :data:`ALERT_CONCURRENCY` at once, each within a total
deadline of :data:`ALERT_DEADLINE_S` (the whole alert with its retries, not each
socket read: a server that trickles its answer is cut off), and whatever is
still running when the owner stops waiting is cancelled with one log line. The
worker gives alerts what is left of its shutdown grace; the reconciler sends
them after its locked pass. A hook may be a coroutine function (cancelled
cleanly at its deadline) or a plain callable (run on a daemon thread, so a hook
that blocks is abandoned at its deadline and never holds the process open at
exit).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import Any, TypeVar

from ledgerq.core.config import ConfigError
from ledgerq.ledger.model import Finished

log = logging.getLogger("ledgerq.alerts")
T = TypeVar("T")

#: Called with each row that ended dead; may return an awaitable.
AlertHook = Callable[[Finished], Awaitable[None] | None]

#: The total time one alert may take (every channel, every retry), in seconds.
ALERT_DEADLINE_S = 5.0
#: Alerts running at once per worker or reconciler.
ALERT_CONCURRENCY = 4
#: Alerts waiting beyond this many are dropped (each drop is logged).
MAX_PENDING_ALERTS = 1000
#: Attempts per channel and alert, and the pauses between them (within the deadline).
ALERT_ATTEMPTS = 3
ALERT_BACKOFF_S = (0.5, 1.5)


class AlertConfigError(ConfigError):
    """An alert channel's settings cannot be used (one line at the CLI, exit 78)."""


class AlertRefused(Exception):
    """The channel's far end refused the alert for good: not retried."""


@dataclass(frozen=True)
class Channel:
    """One way of telling: ``name`` for logs (never a secret), ``send`` raises on failure."""

    name: str
    send: Callable[[Finished], Awaitable[None]]


def task_fields(row: Finished) -> dict[str, Any]:
    """The fields a log line about ``row`` carries (``--log-format json`` shows them)."""
    return {"task_id": row.id, "kind": row.kind, "attempt": row.attempts}


def log_alert(outcome: Finished) -> None:
    last = (outcome.last_error or "").strip().splitlines()
    log.error(
        "task %s (%s) is dead after %d attempts: %s",
        outcome.id,
        outcome.kind,
        outcome.attempts,
        last[-1] if last else "no error recorded",
        extra=task_fields(outcome),
    )


async def send_with_retries(
    channel: Channel,
    row: Finished,
    attempts: int = ALERT_ATTEMPTS,
    backoff_s: Sequence[float] = ALERT_BACKOFF_S,
) -> bool:
    """Send ``row`` through ``channel``, retrying a failure up to ``attempts`` in all;
    whether it went. Every failure is logged (the last one at ERROR)."""
    fields = task_fields(row)
    for attempt in range(1, attempts + 1):
        try:
            await channel.send(row)
            return True
        except AlertRefused as exc:
            log.error(
                "%s refused the alert for task %s: %s", channel.name, row.id, exc, extra=fields
            )
            return False
        except Exception as exc:
            if attempt == attempts:
                log.error(
                    "%s failed for task %s (attempt %d of %d, giving up): %s",
                    channel.name,
                    row.id,
                    attempt,
                    attempts,
                    _reason(exc),
                    extra=fields,
                )
                return False
            pause = backoff_s[min(attempt, len(backoff_s)) - 1]
            log.warning(
                "%s failed for task %s (attempt %d of %d, retrying in %.1f s): %s",
                channel.name,
                row.id,
                attempt,
                attempts,
                pause,
                _reason(exc),
                extra=fields,
            )
            await asyncio.sleep(pause)
    return False


def _reason(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def fan_out(channels: Sequence[Channel]) -> AlertHook:
    """One hook: the log line, then every channel at once, each with its retries."""
    if not channels:
        return log_alert

    async def alert(row: Finished) -> None:
        log_alert(row)
        await asyncio.gather(*(send_with_retries(c, row) for c in channels))

    return alert


def on_daemon_thread(fn: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """``fn(*args)`` on a daemon thread, as a future of this loop. Cancelling the
    future abandons the thread (it runs on, and never holds the process open)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # abandoned at its deadline
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(*args), None
        except BaseException as exc:  # handed to the loop, which decides
            result, error = None, exc
        with suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="ledgerq-alert", daemon=True).start()
    return future


async def call_hook(hook: Callable[[Finished], Any], row: Finished) -> None:
    """Run ``hook`` for ``row``: a coroutine function on the loop, anything else on a
    daemon thread (an awaitable it returns is awaited on the loop)."""
    if inspect.iscoroutinefunction(hook):
        await hook(row)
        return
    result = await on_daemon_thread(hook, row)
    if inspect.isawaitable(result):
        await result


class AlertSender:
    """Sends alerts in the background: bounded concurrency, a total deadline each."""

    def __init__(
        self,
        hook: AlertHook,
        *,
        concurrency: int = ALERT_CONCURRENCY,
        deadline_s: float = ALERT_DEADLINE_S,
        max_pending: int = MAX_PENDING_ALERTS,
    ) -> None:
        self.hook = hook
        self.deadline_s = deadline_s
        self.max_pending = max_pending
        self._slots = asyncio.Semaphore(concurrency)
        self._pending: dict[asyncio.Task[None], int] = {}
        self.timed_out = self.abandoned = self.dropped = 0

    def __len__(self) -> int:
        return len(self._pending)

    def submit(self, row: Finished) -> None:
        if len(self._pending) >= self.max_pending:
            self.dropped += 1
            log.error(
                "%d dead-task alerts are pending; dropping the alert for task %s",
                len(self._pending),
                row.id,
                extra=task_fields(row),
            )
            return
        task = asyncio.create_task(self._send(row), name=f"ledgerq-alert-{row.id}")
        self._pending[task] = row.id
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._pending.pop(task, None)

    async def _send(self, row: Finished) -> None:
        async with self._slots:
            try:
                async with asyncio.timeout(self.deadline_s):
                    await call_hook(self.hook, row)
            except TimeoutError:
                self.timed_out += 1
                log.warning(
                    "the alert for dead task %s took longer than its %.1f s deadline; given up",
                    row.id,
                    self.deadline_s,
                    extra=task_fields(row),
                )
            except Exception:
                log.exception(
                    "the dead-task alert hook failed for task %s", row.id, extra=task_fields(row)
                )

    async def close(self, wait_s: float | None) -> None:
        """Wait up to ``wait_s`` seconds (None: until each has met its deadline) for the
        alerts in flight; cancel the rest, with one log line naming their tasks."""
        if not self._pending:
            return
        waiting = dict(self._pending)
        _, late = await asyncio.wait(
            set(waiting), timeout=None if wait_s is None else max(0.0, wait_s)
        )
        if not late:
            return
        self.abandoned += len(late)
        ids = sorted(waiting[task] for task in late)
        log.warning(
            "abandoning %d dead-task alerts still running when the wait ran out (tasks %s)",
            len(late),
            ", ".join(str(i) for i in ids[:20]) + (", ..." if len(ids) > 20 else ""),
        )
        for task in late:
            task.cancel()
        await asyncio.gather(*late, return_exceptions=True)
