"""Prometheus metrics of the relay and the worker, and the HTTP endpoint that
serves them with ``/healthz`` and ``/readyz`` (``--metrics-port``).

The services report through :class:`~ledgerq.ledger.observer.Observer`;
:class:`RelayMetrics` and :class:`WorkerMetrics` are its Prometheus
implementations, each on a registry of its own (so several services in one
process, as in the tests, never collide), with the process and platform
collectors. This is the only module that imports ``prometheus_client`` (an
import-linter contract), and the composition root imports it only when a
metrics port is set: ``import ledgerq`` and a service without metrics never
load it. Under ``ledgerq worker --processes N`` the children record to files in
``PROMETHEUS_MULTIPROC_DIR`` (prometheus-client's multiprocess mode) and the
supervisor serves their sums (:func:`multiprocess_registry`).

Hot-path cost: per task, one histogram observation for the handler's duration,
one for its start latency, one counter increment for its outcome (label
children looked up once per kind and cached here); per batch, one increment per
counter. docs/performance.md has the measurement.

The endpoint is a WSGI app (prometheus-client's own ``/metrics`` app behind two
routes of ours) on ``wsgiref``'s server, in a daemon thread, on all interfaces
(the kubelet and Prometheus reach the pod's address). It serves only
``/metrics``, ``/healthz`` and ``/readyz`` (anything else: 404), reads no
request body, and shows no secret: the labels are task kinds and outcomes.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Histogram,
    make_wsgi_app,
)

from ledgerq.core.errors import ConfigError
from ledgerq.health import Health
from ledgerq.ledger.observer import Observer

#: Handler durations (seconds): from a millisecond to ten minutes.
DURATION_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    30,
    60,
    120,
    300,
    600,
)
#: Start latency (seconds): due (enqueue commit or run_at) to claim.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)


def new_registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry


class RelayMetrics(Observer):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._published = Counter(
            "ledgerq_published",
            "Tasks the relay published, confirmed by the broker and marked published.",
            registry=registry,
        )
        self._returned = Counter(
            "ledgerq_returned",
            "Publishes the broker returned as unroutable (no queue bound); left pending.",
            registry=registry,
        )
        self._nacked = Counter(
            "ledgerq_confirms_nacked",
            "Publishes the broker nacked; left pending.",
            registry=registry,
        )
        self._unconfirmed = Counter(
            "ledgerq_publish_failed",
            "Publishes not confirmed within --confirm-timeout, or on a failed channel; "
            "left pending.",
            registry=registry,
        )

    def published(self, confirmed: int, returned: int, nacked: int, failed: int) -> None:
        for counter, n in (
            (self._published, confirmed),
            (self._returned, returned),
            (self._nacked, nacked),
            (self._unconfirmed, failed),
        ):
            if n:
                counter.inc(n)


class WorkerMetrics(Observer):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._claimed = Counter(
            "ledgerq_claimed",
            "Deliveries the worker claimed (attempts started).",
            registry=registry,
        )
        self._skipped = Counter(
            "ledgerq_skipped_duplicates",
            "Deliveries acked without running: a duplicate or stale copy whose claim lost.",
            registry=registry,
        )
        self._ended = Counter(
            "ledgerq_tasks_ended",
            "Attempts by outcome as committed: succeeded, failed (a retry is scheduled), "
            "dead, cancelled.",
            ["kind", "outcome"],
            registry=registry,
        )
        self._duration = Histogram(
            "ledgerq_handler_duration_seconds",
            "How long handlers ran, by kind.",
            ["kind"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self._latency = Histogram(
            "ledgerq_start_latency_seconds",
            "From when a task became due (its enqueue commit, or its run_at if later) to its "
            "claim, on the database's clock, by kind.",
            ["kind"],
            buckets=LATENCY_BUCKETS,
            registry=registry,
        )
        self._ended_by: dict[tuple[str, str], Any] = {}
        self._timed_by: dict[str, tuple[Any, Any]] = {}

    def claimed(self, won: int, skipped: int) -> None:
        if won:
            self._claimed.inc(won)
        if skipped:
            self._skipped.inc(skipped)

    def ran(self, kind: str, seconds: float, waited_s: float | None) -> None:
        pair = self._timed_by.get(kind)
        if pair is None:
            pair = self._timed_by[kind] = (self._duration.labels(kind), self._latency.labels(kind))
        pair[0].observe(seconds)
        if waited_s is not None:
            pair[1].observe(waited_s)

    def ended(self, kind: str, outcome: str) -> None:
        child = self._ended_by.get((kind, outcome))
        if child is None:
            child = self._ended_by[(kind, outcome)] = self._ended.labels(kind, outcome)
        child.inc()


def multiprocess_registry(path: str) -> CollectorRegistry:
    """``ledgerq worker --processes N``'s one endpoint: every child's metrics, which
    they write to files in ``path`` (prometheus-client's multiprocess mode, the
    children started with ``PROMETHEUS_MULTIPROC_DIR=path``), summed at each scrape.
    A dead child's counters stay in the sums (its files are kept)."""
    from prometheus_client import multiprocess

    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=path)  # type: ignore[no-untyped-call]
    return registry


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _Quiet(WSGIRequestHandler):
    server_version = "ledgerq"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        return None


Environ = dict[str, Any]
StartResponse = Callable[..., Any]


def wsgi_app(
    health: Health, registry: CollectorRegistry
) -> Callable[[Environ, StartResponse], Iterable[bytes]]:
    metrics = make_wsgi_app(registry)

    def app(environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            ok, text = health.alive()
        elif path == "/readyz":
            ok, text = health.ready()
        else:
            ok, text = False, "not found: try /metrics, /healthz or /readyz"
        status = (
            "200 OK"
            if ok
            else ("404 Not Found" if text.startswith("not found") else "503 Service Unavailable")
        )
        start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
        return [text.encode() + b"\n"]

    return app


class MetricsServer:
    """The endpoint, serving from a daemon thread until :meth:`close`."""

    def __init__(self, port: int, health: Health, registry: CollectorRegistry) -> None:
        try:
            self.httpd = make_server("", port, wsgi_app(health, registry), _Server, _Quiet)
        except OSError as exc:
            raise ConfigError(
                f"--metrics-port {port}: cannot listen: {exc.strerror or exc}"
            ) from None
        self.port = int(self.httpd.server_address[1])
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="ledgerq-metrics", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


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
        tasks = GaugeMetricFamily(
            "ledgerq_tasks",
            "Live tasks by queue and status (pending includes those scheduled later).",
            labels=["queue", "status"],
        )
        due = GaugeMetricFamily(
            "ledgerq_due_tasks", "Pending tasks due now, not yet published, by queue.",
            labels=["queue"],
        )  # fmt: skip
        oldest = GaugeMetricFamily(
            "ledgerq_oldest_due_seconds",
            "Age of the oldest due, unpublished task by queue (0 when none is due).",
            labels=["queue"],
        )
        by_queue: dict[str, dict[str, float]] = {
            queue: {"pending": 0, "published": 0, "running": 0, "due": 0, "oldest": 0.0}
            for queue in snapshot.queues
        }
        for row in snapshot.rows:
            q = by_queue[row["queue"]]
            for key in ("pending", "published", "running", "due"):
                q[key] += int(row[key])
            q["oldest"] = max(q["oldest"], float(row["oldest_due_s"] or 0.0))
        for queue, q in sorted(by_queue.items()):
            for status in ("pending", "published", "running"):
                tasks.add_metric([queue, status], q[status])
            due.add_metric([queue], q["due"])
            oldest.add_metric([queue], q["oldest"])
        unserved = GaugeMetricFamily(
            "ledgerq_unserved_tasks",
            "Due pending tasks no live worker serves (a kind none registers, a shard or "
            "queue none serves), by queue and kind: never attempted, waiting for a worker "
            "(0 once one serves them).",
            labels=["queue", "kind"],
        )
        unserved_oldest = GaugeMetricFamily(
            "ledgerq_unserved_oldest_seconds",
            "Age of the oldest unserved task by queue and kind, since it became due "
            "(0 when none is unserved).",
            labels=["queue", "kind"],
        )
        now = self._clock()
        for (queue, kind), (n, since) in sorted(snapshot.unserved.items()):
            unserved.add_metric([queue, kind], n)
            unserved_oldest.add_metric([queue, kind], 0.0 if n == 0 else max(0.0, now - since))
        capacity = GaugeMetricFamily(
            "ledgerq_window_capacity",
            "Each live broker route's window: its live subscribers' capacity, by queue and "
            'route (route="": the queue\'s own broker queue); gone when no live worker holds '
            "it.",
            labels=["queue", "route"],
        )
        published = GaugeMetricFamily(
            "ledgerq_window_published",
            "Tasks published to each live broker route and not yet claimed, by queue and "
            "route (the rest waits pending in the ledger).",
            labels=["queue", "route"],
        )
        for (queue, route), (cap, pub) in sorted(snapshot.windows.items()):
            capacity.add_metric([queue, route], cap)
            published.add_metric([queue, route], pub)
        return [tasks, due, oldest, unserved, unserved_oldest, capacity, published]


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
