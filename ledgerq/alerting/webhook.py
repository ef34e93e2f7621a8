"""The webhook channel: one JSON POST per dead task to ``LEDGERQ_ALERT_WEBHOOK``.

The URL is checked when the channel is built (an ``http://`` or ``https://`` URL
with a host, printable ASCII, no ``user:password@``); anything else is an
:class:`~ledgerq.alerting.alerts.AlertConfigError` whose line never shows the
URL's path or query, where webhook secrets live. Logs name the scheme, host and
port only. HTTP/1.1 on one connection, closed afterwards; no proxies, and no
redirect is followed: a 3xx (like a 4xx) is refused for good, a 5xx or a
connection that fails is retried (:func:`~ledgerq.alerting.alerts.send_with_retries`).
The caller bounds the total time.
"""

from __future__ import annotations

import asyncio
import json
import re
import ssl
from urllib.parse import SplitResult, urlsplit

from ledgerq.alerting.alerts import AlertConfigError, AlertHook, AlertRefused, Channel, fan_out
from ledgerq.ledger.model import Finished

_STATUS_LINE = re.compile(rb"HTTP/\d(?:\.\d)? (\d{3})")
_URL_CHARS = re.compile(r"[!-~]+")  # printable ASCII, no spaces: nothing to inject


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
    """POST ``body`` to the URL and return the answer's status code (read no further)."""
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


def webhook_channel(url: str) -> Channel:
    """The channel that POSTs each dead task as JSON to ``url`` (checked now)."""
    parts = check_webhook_url(url)
    where = webhook_host(parts)

    async def post(outcome: Finished) -> None:
        body = json.dumps(
            {
                "event": "task.dead",
                "id": outcome.id,
                "kind": outcome.kind,
                "attempts": outcome.attempts,
                "last_error": outcome.last_error,
            }
        ).encode()
        status = await post_json(parts, body)
        if 300 <= status < 400:
            raise AlertRefused(f"answered {status}: a redirect, not followed")
        if 400 <= status < 500:
            raise AlertRefused(f"answered {status}")
        if not 200 <= status < 300:
            raise OSError(f"answered {status}")

    return Channel(f"dead-task webhook {where}", post)


def webhook_alert(url: str) -> AlertHook:
    """A hook that logs the death, then POSTs it as JSON to ``url``."""
    return fan_out([webhook_channel(url)])
