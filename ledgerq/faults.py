"""Test-only crash points: the probe the fault suite uses.

``LEDGERQ_CRASH_AT=<point>`` makes the process SIGKILL itself the
``LEDGERQ_CRASH_AFTER``-th time (default 1) it reaches that point (the points
are listed in :mod:`ledgerq.hooks.probes`). The composition root installs this
probe only when ``LEDGERQ_CRASH_AT`` is set; otherwise the services get
:func:`~ledgerq.hooks.probes.no_probe`.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Mapping

from ledgerq.core.config import ConfigError
from ledgerq.hooks.probes import POINTS, Point, Probe, no_probe


def probe_from_env(environ: Mapping[str, str] | None = None) -> Probe:
    env = os.environ if environ is None else environ
    target = env.get("LEDGERQ_CRASH_AT", "")
    if not target:
        return no_probe
    if target not in POINTS:
        raise ConfigError(f"LEDGERQ_CRASH_AT={target!r} is not one of {sorted(POINTS)}")
    after = int(env.get("LEDGERQ_CRASH_AFTER", "1") or "1")
    hits = 0

    def crash(point: Point) -> None:
        nonlocal hits
        if point != target:
            return
        hits += 1
        if hits >= after:
            os.kill(os.getpid(), signal.SIGKILL)

    return crash
