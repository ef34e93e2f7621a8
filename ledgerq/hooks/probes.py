"""Named points in the services' paths where a test can act.

The relay and the worker call their probe at each point; production passes
:func:`no_probe`. The fault suite's probe (built by the composition root from
``LEDGERQ_CRASH_AT``, see :mod:`ledgerq.faults`) SIGKILLs the process there, so
a crash lands at an exact place in the protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

Point = Literal[
    "worker.after_receive",  # a delivery arrived, nothing claimed
    "worker.mid_handler",  # claimed, handler about to run
    "worker.after_commit",  # terminal status committed, not yet acked
    "relay.after_commit",  # marked published and committed, nothing published yet
    "relay.after_publish",  # published and confirmed, failures not yet returned
]
POINTS: frozenset[str] = frozenset(Point.__args__)  # type: ignore[attr-defined]

Probe = Callable[[Point], None]


def no_probe(point: Point) -> None:
    return None
