"""Test-only crash points, so fault tests reach a crash deterministically.

``LEDGERQ_CRASH_AT=<point>`` makes the process SIGKILL itself the
``LEDGERQ_CRASH_AFTER``-th time (default 1) it reaches ``crash_point(<point>)``.
Unset (always, in production) the check is one string comparison.

Points: ``worker.after_receive`` (a delivery arrived, nothing claimed),
``worker.mid_handler`` (claimed, handler about to run),
``worker.after_commit`` (terminal status committed, not yet acked),
``relay.after_publish`` (published and confirmed, not yet marked published).
"""

from __future__ import annotations

import os
import signal

POINTS = frozenset(
    {"worker.after_receive", "worker.mid_handler", "worker.after_commit", "relay.after_publish"}
)

_target = os.environ.get("LEDGERQ_CRASH_AT", "")
_after = int(os.environ.get("LEDGERQ_CRASH_AFTER", "1") or "1")
_hits = 0

if _target and _target not in POINTS:
    raise RuntimeError(f"LEDGERQ_CRASH_AT={_target!r} is not one of {sorted(POINTS)}")


def crash_point(name: str) -> None:
    global _hits
    if name != _target:
        return
    _hits += 1
    if _hits >= _after:
        os.kill(os.getpid(), signal.SIGKILL)
