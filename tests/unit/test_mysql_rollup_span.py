"""The MySQL ledger's rollup span (``ledgerq.ledger.mysql.rollup.next_span``):
PostgreSQL's ``rollup_span`` rule, every bound a whole minute."""

from __future__ import annotations

from datetime import datetime, timedelta

from ledgerq.ledger.mysql.rollup import Span, next_span

NOW = datetime(2026, 11, 28, 15, 30, 42, 123456)
MIN = timedelta(minutes=1)


def test_the_first_step_starts_a_backfill_ago_and_skips_to_the_first_finish() -> None:
    first = datetime(2026, 11, 28, 14, 10, 5)
    span = next_span(None, NOW, first, 60.0, 3600.0, 7200.0)
    assert span == Span(datetime(2026, 11, 28, 14, 10), datetime(2026, 11, 28, 15, 10), False)


def test_a_span_ends_settle_s_before_now_on_a_minute_and_says_it_caught_up() -> None:
    mark = datetime(2026, 11, 28, 15, 0)
    span = next_span(mark, NOW, mark + MIN * 3, 60.0, 3600.0, 7200.0)
    assert span == Span(mark + MIN * 3, datetime(2026, 11, 28, 15, 29), True)


def test_nothing_finished_since_the_mark_is_one_empty_step_to_the_ripe_minute() -> None:
    span = next_span(datetime(2026, 11, 28, 9, 0), NOW, None, 60.0, 3600.0, 7200.0)
    ripe = datetime(2026, 11, 28, 15, 29)
    assert span == Span(ripe, ripe, True)


def test_max_span_s_is_taken_in_whole_minutes_and_at_least_one() -> None:
    mark = datetime(2026, 11, 28, 12, 0)
    assert next_span(mark, NOW, mark, 60.0, 150.0, 0.0).hi == mark + MIN * 2
    assert next_span(mark, NOW, mark, 60.0, 30.0, 0.0).hi == mark + MIN
