"""The consumers package's named SQL (``queries.sql``)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause

from ledger.sql import load


@dataclass(frozen=True)
class ConsumerQueries:
    create_orders: TextClause
    create_receipts: TextClause
    insert_order: TextClause
    insert_receipt: TextClause
    reset_demo: TextClause
    clear_run: TextClause
    count_receipts: TextClause
    count_history: TextClause
    drain_span: TextClause
    latencies: TextClause
    fill_history: TextClause
    vacuum_history: TextClause
    checkpoint: TextClause


Q: ConsumerQueries = load(ConsumerQueries, "consumers", "queries.sql")
