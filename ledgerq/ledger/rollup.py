"""The rollup's arithmetic: latency buckets, percentiles read from them, and the
overview's time windows (the SQL side is ``overview.sql`` and migration 0008).

Latencies are counted in fixed log-scale buckets (:data:`BUCKETS` of them):
bucket 0 holds durations under 1 ms, bucket ``b`` those in
``[1 ms * 2 ** ((b - 1) / 2), 1 ms * 2 ** (b / 2))``, and the last one
everything from about 3.3 hours up. A percentile is the upper bound of the
bucket where the cumulative count reaches it: never under the true value, and
at most a factor of sqrt(2) (41 %) over it -- the price of summing histograms
per minute instead of keeping every duration (docs/design.md, "The dashboard's
rollup").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta

BUCKETS = 48
#: The hops the ledger's timestamps measure, in order (``ledgerq_hops`` in SQL).
HOPS = ("due_publish", "publish_start", "start_end", "total")
HOP_TITLES = {
    "due_publish": "due → published",
    "publish_start": "published → started",
    "start_end": "started → ended",
    "total": "committed → ended",
}
PERCENTILES = (0.5, 0.95, 0.99)


def bucket_of(seconds: float) -> int:
    """The bucket of a duration: what SQL's ``ledgerq_latency_bucket`` computes."""
    return min(BUCKETS - 1, max(0, math.floor(2 * math.log2(max(seconds, 0.0001) / 0.001)) + 1))


def bucket_upper(bucket: int) -> float:
    """The largest duration (seconds) bucket ``bucket`` holds (the last: infinity)."""
    if not 0 <= bucket < BUCKETS:
        raise ValueError(f"bucket must be 0..{BUCKETS - 1}, got {bucket}")
    if bucket == BUCKETS - 1:
        return float("inf")
    return 0.001 * 2 ** (bucket / 2)


def percentile(counts: Mapping[int, int], p: float) -> float | None:
    """The ``p`` quantile (0 < p <= 1) of a histogram ``{bucket: count}``, as its
    bucket's upper bound; None if it is empty."""
    if not 0 < p <= 1:
        raise ValueError(f"p must be in (0, 1], got {p}")
    total = sum(counts.values())
    if total == 0:
        return None
    rank, seen = p * total, 0
    for bucket in sorted(counts):
        seen += counts[bucket]
        if seen >= rank:
            return bucket_upper(bucket)
    return bucket_upper(max(counts))


@dataclass(frozen=True)
class Window:
    """A time window of the overview's charts and the width of one point."""

    name: str
    span: timedelta
    step: timedelta

    @property
    def grain(self) -> str:
        """Which rollup rows serve it: ``hour`` for steps of an hour or more (the
        window then starts on an hour), else ``minute``."""
        return "hour" if self.step >= timedelta(hours=1) else "minute"


WINDOWS = {
    w.name: w
    for w in (
        Window("1h", timedelta(hours=1), timedelta(minutes=1)),
        Window("6h", timedelta(hours=6), timedelta(minutes=5)),
        Window("24h", timedelta(hours=24), timedelta(minutes=15)),
        Window("7d", timedelta(days=7), timedelta(hours=2)),
    )
}
DEFAULT_WINDOW = "1h"
