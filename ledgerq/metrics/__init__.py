"""Prometheus metrics of the relay and the worker, and the HTTP endpoint that
serves them with ``/healthz`` and ``/readyz`` (``--metrics-port``).

The services report through :class:`~ledgerq.ledger.observer.Observer`;
:class:`RelayMetrics` and :class:`WorkerMetrics` are its Prometheus
implementations, each on a registry of its own (so several services in one
process, as in the tests, never collide), with the process and platform
collectors. This package is the only one that imports ``prometheus_client`` (an
import-linter contract; the ledger's own gauges are :mod:`.gauges`), and the
composition root imports it only when a metrics port is set: ``import ledgerq``
and a service without metrics never load it. Under ``ledgerq worker --processes
N`` the children record to files in ``PROMETHEUS_MULTIPROC_DIR`` (prometheus-
client's multiprocess mode) and the supervisor serves their sums
(:func:`multiprocess_registry`).

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

import threading
from collections.abc import Callable, Iterable
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


#: The relay's counters (name, help), in the order :meth:`RelayMetrics.published`
#: takes their amounts.
_RELAY_COUNTERS = (
    (
        "ledgerq_published",
        "Tasks the relay published, confirmed by the broker and marked published.",
    ),
    (
        "ledgerq_returned",
        "Publishes the broker returned as unroutable (no queue bound); left pending.",
    ),
    ("ledgerq_confirms_nacked", "Publishes the broker nacked; left pending."),
    (
        "ledgerq_publish_failed",
        "Publishes not confirmed within --confirm-timeout, or on a failed channel; left pending.",
    ),
)
#: The worker's per-batch counters, in the order :meth:`WorkerMetrics.claimed` takes
#: their amounts.
_WORKER_COUNTERS = (
    ("ledgerq_claimed", "Deliveries the worker claimed (attempts started)."),
    (
        "ledgerq_skipped_duplicates",
        "Deliveries acked without running: a duplicate or stale copy whose claim lost.",
    ),
)


def _counters(registry: CollectorRegistry, table: Iterable[tuple[str, str]]) -> list[Counter]:
    return [Counter(name, text, registry=registry) for name, text in table]


def _add(counters: list[Counter], amounts: tuple[int, ...]) -> None:
    """Each counter up by its amount, once per batch (an amount of 0: no increment)."""
    for counter, n in zip(counters, amounts, strict=True):
        if n:
            counter.inc(n)


class RelayMetrics(Observer):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._counters = _counters(registry, _RELAY_COUNTERS)

    def published(self, confirmed: int, returned: int, nacked: int, failed: int) -> None:
        _add(self._counters, (confirmed, returned, nacked, failed))


class WorkerMetrics(Observer):
    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._batch_counters = _counters(registry, _WORKER_COUNTERS)
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
        _add(self._batch_counters, (won, skipped))

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
