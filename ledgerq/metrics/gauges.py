"""The ledger's own gauges on the metrics endpoint: what is unserved and what each
broker window holds, read from the ledger every few seconds by whoever serves
them (the dashboard's ``--metrics-port``), never on a request. The reads are the
seam's (``live_counts``, ``unserved``, ``windows``: the hot table and the
subscriptions, never history), so the gauges are the same on a PostgreSQL and
on a MySQL / MariaDB ledger.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry


class LedgerGauges:
    """The dashboard's gauges from the ledger (``ledgerq dashboard --metrics-port``):
    tasks by queue and live status, the due backlog and its oldest task's age per
    queue; the unserved backlog (due tasks no live worker serves) and its oldest
    task's age per queue and kind; each live broker route's window. A custom
    collector over a snapshot that :meth:`update` swaps whole, so a scrape never
    sees half an update; refreshed by the dashboard every 15 s.

    A series that stops having anything to count reports 0 rather than vanishing,
    wherever 0 is the truth: an alert rule such as ``ledgerq_unserved_tasks > 0``
    reads a vanished series as "no data", never as "all clear". So every queue seen
    since start (and ``default``) keeps its ``ledgerq_tasks``, ``ledgerq_due_tasks``
    and ``ledgerq_oldest_due_seconds``, and every (queue, kind) seen unserved since
    start keeps ``ledgerq_unserved_tasks`` and ``ledgerq_unserved_oldest_seconds``
    at 0 once a worker serves it (the labels are bounded: kinds and queues).

    The window gauges are the exception: a route is there only while a live
    subscriber holds it, and vanishes when the last one leaves (or its subscription
    expires). Its capacity would then be 0 while tasks may still sit published to
    it, and a rule such as ``ledgerq_window_published >= ledgerq_window_capacity``
    ("the window is full") would fire on a route that no longer exists; routes are
    also digests of a worker's ``--kinds``/``--shards``, so a gone one rarely comes
    back.

    ``ledgerq_unserved_oldest_seconds`` is computed at each scrape from the oldest
    task's due time and this host's clock, so it grows between refreshes (a skew
    between this host's clock and the database's shifts it by as much);
    ``ledgerq_oldest_due_seconds`` is the database's figure at the last refresh.
    """

    def __init__(self, registry: CollectorRegistry, clock: Callable[[], float] = time.time) -> None:
        self._snapshot = _Snapshot()
        #: Every queue seen since start (and ``default``): a queue that empties keeps
        #: reporting 0, so a rule such as ``ledgerq_due_tasks > 100`` sees 0, not no
        #: series at all (which it would read as "no data", never as "all clear").
        self._queues: set[str] = {"default"}
        #: Every (queue, kind) seen unserved since start: reports 0 once served.
        self._unserved_seen: set[tuple[str, str]] = set()
        self._clock = clock
        registry.register(self)

    def update(
        self,
        live_counts: list[dict[str, Any]],
        unserved: Iterable[Mapping[str, Any]] = (),
        windows: Iterable[Mapping[str, Any]] = (),
    ) -> None:
        """Swap in a new snapshot: ``live_counts`` (``ledger.live_counts()``),
        ``unserved`` (``ledger.unserved()``: queue, kind, shard, tasks, oldest) and
        ``windows`` (``ledger.windows()``: queue, route, capacity, published)."""
        rows = list(live_counts)
        self._queues |= {str(row["queue"]) for row in rows}
        # Per (queue, kind), over its shards: the tasks, and the oldest due time
        # (epoch seconds).
        waiting: dict[tuple[str, str], tuple[int, float]] = {}
        for row in unserved:
            key = (str(row["queue"]), str(row["kind"]))
            tasks, oldest = waiting.get(key, (0, math.inf))
            waiting[key] = (tasks + int(row["tasks"]), min(oldest, _epoch(row["oldest"])))
        self._unserved_seen |= set(waiting)
        # Per (queue, route): one row each (a route is a digest of the kinds and
        # shards), summed and maxed in case: the subscribers' capacity adds up, the
        # published count is the route's own.
        routes: dict[tuple[str, str], tuple[int, int]] = {}
        for row in windows:
            key = (str(row["queue"]), str(row["route"] or ""))
            capacity, published = routes.get(key, (0, 0))
            routes[key] = (capacity + int(row["capacity"]), max(published, int(row["published"])))
        unserved_all = {key: (0, math.inf) for key in self._unserved_seen}
        unserved_all.update(waiting)
        self._snapshot = _Snapshot(rows, frozenset(self._queues), unserved_all, routes)

    def describe(self) -> Iterable[Any]:
        return []

    def collect(self) -> Iterable[Any]:
        from prometheus_client.core import GaugeMetricFamily

        snapshot = self._snapshot  # one read: the update swaps the whole snapshot
        g = {
            key: GaugeMetricFamily(name, text, labels=list(labels))
            for key, (name, text, labels) in _GAUGES.items()
        }
        by_queue: dict[str, dict[str, float]] = {
            queue: {**dict.fromkeys((*LIVE_STATUSES, "due"), 0), "oldest": 0.0}
            for queue in snapshot.queues
        }
        for row in snapshot.rows:
            q = by_queue[row["queue"]]
            for key in (*LIVE_STATUSES, "due"):
                q[key] += int(row[key])
            q["oldest"] = max(q["oldest"], float(row["oldest_due_s"] or 0.0))
        for queue, q in sorted(by_queue.items()):
            for status in LIVE_STATUSES:
                g["tasks"].add_metric([queue, status], q[status])
            g["due"].add_metric([queue], q["due"])
            g["oldest"].add_metric([queue], q["oldest"])
        now = self._clock()
        for (queue, kind), (n, since) in sorted(snapshot.unserved.items()):
            g["unserved"].add_metric([queue, kind], n)
            age = 0.0 if n == 0 else max(0.0, now - since)
            g["unserved_oldest"].add_metric([queue, kind], age)
        for (queue, route), (cap, pub) in sorted(snapshot.windows.items()):
            g["capacity"].add_metric([queue, route], cap)
            g["published"].add_metric([queue, route], pub)
        return list(g.values())


#: The statuses of the hot table ``ledgerq_tasks`` reports, each a label value.
LIVE_STATUSES = ("pending", "published", "running", "waiting")

#: Each gauge a scrape reports, in its order: (name, help, labels).
_GAUGES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tasks": (
        "ledgerq_tasks",
        "Live tasks by queue and status (pending includes those scheduled later; waiting: "
        "enqueued with after=, for the tasks it names).",
        ("queue", "status"),
    ),
    "due": (
        "ledgerq_due_tasks",
        "Pending tasks due now, not yet published, by queue.",
        ("queue",),
    ),
    "oldest": (
        "ledgerq_oldest_due_seconds",
        "Age of the oldest due, unpublished task by queue (0 when none is due).",
        ("queue",),
    ),
    "unserved": (
        "ledgerq_unserved_tasks",
        "Due pending tasks no live worker serves (a kind none registers, a shard or "
        "queue none serves), by queue and kind: never attempted, waiting for a worker "
        "(0 once one serves them).",
        ("queue", "kind"),
    ),
    "unserved_oldest": (
        "ledgerq_unserved_oldest_seconds",
        "Age of the oldest unserved task by queue and kind, since it became due "
        "(0 when none is unserved).",
        ("queue", "kind"),
    ),
    "capacity": (
        "ledgerq_window_capacity",
        "Each live broker route's window: its live subscribers' capacity, by queue and "
        'route (route="": the queue\'s own broker queue); gone when no live worker holds '
        "it.",
        ("queue", "route"),
    ),
    "published": (
        "ledgerq_window_published",
        "Tasks published to each live broker route and not yet claimed, by queue and "
        "route (the rest waits pending in the ledger).",
        ("queue", "route"),
    ),
}


@dataclass(frozen=True)
class _Snapshot:
    """What :meth:`LedgerGauges.collect` reports, swapped whole by ``update``."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    queues: frozenset[str] = frozenset({"default"})
    #: (queue, kind) -> (tasks, oldest due time in epoch seconds; inf when none).
    unserved: dict[tuple[str, str], tuple[int, float]] = field(default_factory=dict)
    #: (queue, route) -> (capacity, published).
    windows: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)


def _epoch(value: Any) -> float:
    """A due time as epoch seconds: a datetime (naive ones are UTC) or a number."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).timestamp()
    return float(value)
