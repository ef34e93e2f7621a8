"""The dashboard's unserved and window gauges (:class:`~ledgerq.metrics.gauges.LedgerGauges`):
a (queue, kind) once unserved reads 0 when a worker serves it (an alert rule reads
a vanished series as no data), its shards add up and its age is the oldest's; a
broker route's window is there only while it is live."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from ledgerq.metrics.gauges import LedgerGauges

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(registry: CollectorRegistry) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }


def unserved(queue: str, kind: str, shard: int, tasks: int, age_s: float) -> dict[str, object]:
    return {"queue": queue, "kind": kind, "shard": shard, "tasks": tasks,
            "oldest": NOW - timedelta(seconds=age_s)}  # fmt: skip


def window(queue: str, route: str, capacity: int, published: int) -> dict[str, object]:
    return {"queue": queue, "route": route, "capacity": capacity, "published": published,
            "room": max(capacity - published, 0)}  # fmt: skip


def gauges() -> tuple[LedgerGauges, CollectorRegistry]:
    registry = CollectorRegistry()
    return LedgerGauges(registry, clock=NOW.timestamp), registry


def of(name: str, samples: Samples) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


Q_K = (("kind", "mail.send"), ("queue", "default"))


def test_a_kind_served_again_reports_zero_and_the_others_are_untouched() -> None:
    g, registry = gauges()
    g.update(
        [],
        [unserved("default", "mail.send", 0, 2, 30.0), unserved("default", "mail.send", 3, 1, 90),
         unserved("other", "pdf.render", 1, 4, 5.0)],
    )  # fmt: skip
    first = scrape(registry)
    assert of("ledgerq_unserved_tasks", first) == {
        Q_K: 3.0,
        (("kind", "pdf.render"), ("queue", "other")): 4.0,
    }
    assert of("ledgerq_unserved_oldest_seconds", first)[Q_K] == 90.0  # the oldest shard's
    # A worker now registers mail.send: it reads 0, it does not vanish.
    g.update([], [unserved("other", "pdf.render", 1, 4, 5.0)])
    later = scrape(registry)
    assert of("ledgerq_unserved_tasks", later) == {
        Q_K: 0.0,
        (("kind", "pdf.render"), ("queue", "other")): 4.0,
    }
    assert of("ledgerq_unserved_oldest_seconds", later)[Q_K] == 0.0
    # The existing gauges are still there, unchanged.
    assert later[("ledgerq_due_tasks", (("queue", "default"),))] == 0.0


def test_a_kind_unserved_again_counts_from_its_new_oldest() -> None:
    g, registry = gauges()
    g.update([], [unserved("default", "mail.send", 0, 1, 600.0)])
    g.update([], [])
    g.update([], [unserved("default", "mail.send", 0, 2, 3.0)])
    samples = scrape(registry)
    assert of("ledgerq_unserved_tasks", samples) == {Q_K: 2.0}
    assert of("ledgerq_unserved_oldest_seconds", samples) == {Q_K: 3.0}


def test_nothing_unserved_yet_means_no_unserved_series() -> None:
    g, registry = gauges()
    g.update([])
    samples = scrape(registry)
    assert of("ledgerq_unserved_tasks", samples) == {}
    assert of("ledgerq_window_capacity", samples) == {}


def test_a_window_is_reported_while_live_and_vanishes_with_its_route() -> None:
    g, registry = gauges()
    g.update([], [], [window("default", "", 16, 5), window("default", "r-0123456789abcdef", 8, 8)])
    samples = scrape(registry)
    own = (("queue", "default"), ("route", ""))
    routed = (("queue", "default"), ("route", "r-0123456789abcdef"))
    assert of("ledgerq_window_capacity", samples) == {own: 16.0, routed: 8.0}
    assert of("ledgerq_window_published", samples) == {own: 5.0, routed: 8.0}
    # The routed subscriber left: its window goes (capacity 0 would read as "full").
    g.update([], [], [window("default", "", 16, 2)])
    samples = scrape(registry)
    assert of("ledgerq_window_capacity", samples) == {own: 16.0}
    assert of("ledgerq_window_published", samples) == {own: 2.0}
