"""The dashboard's ledger gauges keep a series per queue once seen: an emptied queue
reads 0 rather than vanishing (an alert rule reads a vanished series as no data)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from ledgerq.metrics.gauges import LedgerGauges


def row(queue: str, due: int, oldest: float | None) -> dict[str, object]:
    return {"queue": queue, "pending": due + 1, "published": 2, "running": 3, "waiting": 4,
            "due": due, "oldest_due_s": oldest}  # fmt: skip


def scrape(registry: CollectorRegistry) -> str:
    return generate_latest(registry).decode()


def test_an_empty_ledger_reports_zero_for_default() -> None:
    registry = CollectorRegistry()
    LedgerGauges(registry).update([])
    text = scrape(registry)
    assert 'ledgerq_due_tasks{queue="default"} 0.0' in text
    assert 'ledgerq_tasks{queue="default",status="running"} 0.0' in text


def test_a_queue_that_empties_keeps_reporting_zero() -> None:
    registry = CollectorRegistry()
    gauges = LedgerGauges(registry)
    gauges.update([row("mail", 5, 12.5), row("mail", 2, 40.0)])
    text = scrape(registry)
    assert 'ledgerq_due_tasks{queue="mail"} 7.0' in text
    assert 'ledgerq_oldest_due_seconds{queue="mail"} 40.0' in text
    assert 'ledgerq_tasks{queue="mail",status="pending"} 9.0' in text
    assert 'ledgerq_tasks{queue="mail",status="waiting"} 8.0' in text  # after=, per queue
    gauges.update([])
    text = scrape(registry)
    assert 'ledgerq_due_tasks{queue="mail"} 0.0' in text
    assert 'ledgerq_oldest_due_seconds{queue="mail"} 0.0' in text
