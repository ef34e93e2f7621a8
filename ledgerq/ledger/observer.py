"""What the relay and the worker report as they go, for metrics.

The services call an :class:`Observer`; the base class does nothing, so a
service built without metrics pays one method call per batch or task and
nothing else. :class:`ledgerq.metrics.PrometheusObserver` (built by the
composition root when ``--metrics-port`` is given) turns the calls into
Prometheus counters and histograms. The services never import a metrics
library themselves (an import-linter contract keeps ``prometheus_client`` in
:mod:`ledgerq.metrics`).

Calls happen on the service's event loop, after the fact (a batch's counts once
its statement returned, a task's outcome once it is committed), so an observer
never changes what the services do; it must be quick and must not raise.
"""

from __future__ import annotations


class Observer:
    """Receives the services' counts; every method does nothing here."""

    def published(self, confirmed: int, returned: int, nacked: int, failed: int) -> None:
        """A relay batch: rows marked published, returned unroutable, nacked, unconfirmed."""

    def claimed(self, won: int, skipped: int) -> None:
        """A claim batch: deliveries claimed, and stale or duplicate ones acked unrun."""

    def ran(self, kind: str, seconds: float, waited_s: float | None) -> None:
        """A handler ran for ``seconds``; it had waited ``waited_s`` from due to claim."""

    def ended(self, kind: str, outcome: str) -> None:
        """An attempt's committed outcome: succeeded, failed (retry), dead or cancelled."""


#: The observer of a service built without metrics.
NO_OBSERVER = Observer()
