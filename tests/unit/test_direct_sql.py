"""``claim_due`` (direct.sql) selects as ``select_due`` (queries.sql) does: its
scheduling CTEs are select_due's, word for word, plus the worker's queues. A
rule added to one and not the other fails here."""

from __future__ import annotations

from ledgerq.ledger.sql import DQ, Q

QUEUE_FILTER = "AND t.queue = ANY(CAST(:queues AS text[]))"


def _scheduling(sql: str) -> str:
    """The CTEs from ``buckets`` up to ``picked``, the queue filter taken out."""
    start, end = sql.index("WITH buckets AS ("), sql.index("), picked AS (")
    lines = [ln.strip() for ln in sql[start:end].splitlines()]
    return "\n".join(ln for ln in lines if ln != QUEUE_FILTER)


def test_claim_due_selects_as_select_due_does() -> None:
    assert _scheduling(DQ.claim_due.text) == _scheduling(Q.select_due.text)


def test_claim_due_filters_each_selection_by_the_workers_queues() -> None:
    # aged, fresh and metered each take only the worker's queues
    assert DQ.claim_due.text.count(QUEUE_FILTER) == 3
    assert QUEUE_FILTER not in Q.select_due.text


def test_claim_due_claims_only_pending_rows_under_their_epoch() -> None:
    claim = DQ.claim_due.text[DQ.claim_due.text.index("claimed AS (") :]
    assert "t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending'" in claim
    assert "epoch = t.epoch + 1" in claim
