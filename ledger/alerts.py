"""Dead-letter alerts: called once for every task that ends ``dead``.

The default hook logs one ERROR line. ``LEDGERQ_ALERT_WEBHOOK`` (a URL) adds a
JSON POST per dead task; a failing webhook is logged and never blocks the
worker or the reconciler (the dead task is in history either way).
"""

from __future__ import annotations

import json
import logging
import os
import urllib.request
from collections.abc import Callable

from ledgerq.ledger.model import Finished

log = logging.getLogger("ledgerq.alerts")

AlertHook = Callable[[Finished], None]


def log_alert(outcome: Finished) -> None:
    last = (outcome.last_error or "").strip().splitlines()
    log.error(
        "task %s (%s) is dead after %d attempts: %s",
        outcome.id,
        outcome.kind,
        outcome.attempts,
        last[-1] if last else "no error recorded",
    )


def webhook_alert(url: str, timeout: float = 5.0) -> AlertHook:
    def post(outcome: Finished) -> None:
        log_alert(outcome)
        body = json.dumps(
            {
                "event": "task.dead",
                "id": outcome.id,
                "kind": outcome.kind,
                "attempts": outcome.attempts,
                "last_error": outcome.last_error,
            }
        )
        request = urllib.request.Request(
            url, data=body.encode(), method="POST", headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except OSError as exc:
            log.warning("dead-task webhook %s failed for task %s: %s", url, outcome.id, exc)

    return post


def safe_alert(hook: AlertHook, outcome: Finished) -> None:
    """Call ``hook``; an alert that fails is logged, never raised into the caller."""
    try:
        hook(outcome)
    except Exception:
        log.exception("the dead-task alert hook failed for task %s", outcome.id)


def default_alert() -> AlertHook:
    url = os.environ.get("LEDGERQ_ALERT_WEBHOOK")
    return webhook_alert(url) if url else log_alert
