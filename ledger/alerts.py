"""Dead-letter alerts: called once for every task that ends ``dead``.

The default hook logs one ERROR line. ``LEDGERQ_ALERT_WEBHOOK`` (an ``http://``
or ``https://`` URL, checked when the hook is built: anything else is a
:class:`AlertConfigError`, one line at the CLI) adds a JSON POST per dead task.

Alerts never hold a service up. :class:`AlertSender` runs them in the
background: at most :data:`ALERT_CONCURRENCY` at once, each within a total
deadline of :data:`ALERT_DEADLINE_S` (the whole alert, not each socket read: a
server that trickles its answer is cut off), no redirect is followed (a 3xx is
logged as a failure), and whatever is still running when the owner stops
waiting is cancelled with one log line. The worker gives alerts what is left of
its shutdown grace; the reconciler sends them after its locked pass. A hook
may be a coroutine function (cancelled cleanly at its deadline) or a plain
callable (run on a daemon thread, so a hook that blocks is abandoned at its
deadline and never holds the process open at exit).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
import re
import ssl
import threading
from collections.abc import Awaitable, Callable
from contextlib import suppress
from typing import Any
from urllib.parse import SplitResult, urlsplit

from ledgerq.ledger.config import ConfigError
from ledgerq.ledger.model import Finished

log = logging.getLogger("ledgerq.alerts")

#: Called with each row that ended dead; may return an awaitable.
AlertHook = Callable[[Finished], Awaitable[None] | None]

#: The total time one alert may take (connect, send, answer), in seconds.
ALERT_DEADLINE_S = 5.0
#: Alerts running at once per worker or reconciler.
ALERT_CONCURRENCY = 4
#: Alerts waiting beyond this many are dropped (each drop is logged).
MAX_PENDING_ALERTS = 1000

_STATUS_LINE = re.compile(rb"HTTP/\d(?:\.\d)? (\d{3})")
_URL_CHARS = re.compile(r"[!-~]+")  # printable ASCII, no spaces: nothing to inject


class AlertConfigError(ConfigError):
    """The dead-task webhook URL cannot be used."""


def log_alert(outcome: Finished) -> None:
    last = (outcome.last_error or "").strip().splitlines()
    log.error(
        "task %s (%s) is dead after %d attempts: %s",
        outcome.id,
        outcome.kind,
        outcome.attempts,
        last[-1] if last else "no error recorded",
    )


def check_webhook_url(url: str) -> SplitResult:
    """The URL's parts, or :class:`AlertConfigError` (which never shows its path or query,
    where webhook secrets live)."""
    parts = urlsplit(url) if _URL_CHARS.fullmatch(url) else None
    scheme = url.split(":", 1)[0] if ":" in url else ""
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise AlertConfigError(
            "LEDGERQ_ALERT_WEBHOOK must be an http:// or https:// URL with a host "
            f"(printable ASCII, no spaces), got one with scheme {scheme[:20]!r}"
        )
    if parts.username is not None or parts.password is not None:
        raise AlertConfigError(
            "LEDGERQ_ALERT_WEBHOOK must not carry user:password@; put a token in its path"
        )
    try:
        parts.port
    except ValueError:
        raise AlertConfigError("LEDGERQ_ALERT_WEBHOOK has a malformed port") from None
    return parts


def webhook_host(parts: SplitResult) -> str:
    """Where a webhook goes, for logs: scheme, host and port only."""
    return f"{parts.scheme}://{parts.netloc}"


async def post_json(parts: SplitResult, body: bytes) -> int:
    """POST ``body`` to the URL and return the answer's status code (read no further).

    HTTP/1.1 on one connection, closed afterwards; no redirects, no proxies. The
    caller bounds the total time (see :class:`AlertSender`)."""
    https = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if https else 80)
    reader, writer = await asyncio.open_connection(
        host,
        port,
        ssl=ssl.create_default_context() if https else None,
        server_hostname=host if https else None,
    )
    try:
        target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        head = (
            f"POST {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nUser-Agent: ledgerq\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        writer.write(head.encode("ascii") + body)
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    match = _STATUS_LINE.match(line)
    if match is None:
        raise OSError(f"not an HTTP answer: {line[:40]!r}")
    return int(match.group(1))


def webhook_alert(url: str) -> AlertHook:
    """A hook that logs the death, then POSTs it as JSON to ``url``."""
    parts = check_webhook_url(url)
    where = webhook_host(parts)

    async def post(outcome: Finished) -> None:
        log_alert(outcome)
        body = json.dumps(
            {
                "event": "task.dead",
                "id": outcome.id,
                "kind": outcome.kind,
                "attempts": outcome.attempts,
                "last_error": outcome.last_error,
            }
        ).encode()
        try:
            status = await post_json(parts, body)
        except OSError as exc:
            log.warning("dead-task webhook %s failed for task %s: %s", where, outcome.id, exc)
            return
        if 300 <= status < 400:
            log.warning(
                "dead-task webhook %s answered %d for task %s: a redirect, not followed",
                where,
                status,
                outcome.id,
            )
        elif not 200 <= status < 300:
            log.warning("dead-task webhook %s answered %d for task %s", where, status, outcome.id)

    return post


def default_alert() -> AlertHook:
    """The webhook hook if ``LEDGERQ_ALERT_WEBHOOK`` is set (checked now), else the log line."""
    url = os.environ.get("LEDGERQ_ALERT_WEBHOOK")
    return webhook_alert(url) if url else log_alert


def _on_daemon_thread(fn: Callable[[Finished], Any], row: Finished) -> asyncio.Future[Any]:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if future.done():  # abandoned at its deadline
            return
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(row), None
        except BaseException as exc:  # handed to the loop, which decides
            result, error = None, exc
        with suppress(RuntimeError):  # the loop has closed: nobody waits any more
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=run, name="ledgerq-alert", daemon=True).start()
    return future


async def call_hook(hook: AlertHook, row: Finished) -> None:
    """Run ``hook`` for ``row``: a coroutine function on the loop, anything else on a
    daemon thread (an awaitable it returns is awaited on the loop)."""
    if inspect.iscoroutinefunction(hook):
        await hook(row)
        return
    result = await _on_daemon_thread(hook, row)
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
                )
            except Exception:
                log.exception("the dead-task alert hook failed for task %s", row.id)

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
