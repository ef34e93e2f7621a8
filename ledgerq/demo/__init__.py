"""The demo shop: its tables, its handlers (:mod:`.app`), and the play of orders."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Engine, TextClause

from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class ShopQueries:
    create_orders: TextClause
    create_receipts: TextClause
    insert_order: TextClause
    insert_receipt: TextClause
    reset: TextClause
    count_receipts: TextClause


Q: ShopQueries = load(ShopQueries, "ledgerq.demo", "queries.sql")


def prepare_shop(engine: Engine, *, reset: bool) -> None:
    """Create the shop's tables (and empty them, with ``reset``)."""
    with engine.begin() as conn:
        conn.execute(Q.create_orders)
        conn.execute(Q.create_receipts)
        if reset:
            conn.execute(Q.reset)
