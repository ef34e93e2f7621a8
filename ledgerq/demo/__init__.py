"""The demo shop: its tables, its handlers (:mod:`.app`), and the play of orders."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

from sqlalchemy import Connection, CursorResult, Engine, TextClause
from sqlalchemy.orm import Session

from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class ShopQueries:
    create_orders: TextClause
    create_receipts: TextClause
    insert_order: TextClause
    insert_receipt: TextClause
    reset: TextClause
    reset_receipts: TextClause
    count_receipts: TextClause


Q: ShopQueries = load(ShopQueries, "ledgerq.demo", "queries.sql")
#: The same statements on a MySQL / MariaDB ledger.
MY_Q: ShopQueries = load(ShopQueries, "ledgerq.demo", "queries_mysql.sql")


def shop_queries(engine: Engine | Connection) -> ShopQueries:
    """The shop's statements for the server ``engine`` is on."""
    return MY_Q if engine.dialect.name in ("mysql", "mariadb") else Q


def place_order(session: Session, customer: str) -> int:
    """Insert one order in the session's transaction; its id."""
    conn = session.connection()
    result = cast(
        "CursorResult[Any]", conn.execute(shop_queries(conn).insert_order, {"customer": customer})
    )
    return int(result.scalar_one() if result.returns_rows else result.lastrowid)


def prepare_shop(engine: Engine, *, reset: bool) -> None:
    """Create the shop's tables (and empty them, with ``reset``)."""
    queries = shop_queries(engine)
    with engine.begin() as conn:
        conn.execute(queries.create_orders)
        conn.execute(queries.create_receipts)
        if reset:
            conn.execute(queries.reset)
            conn.execute(queries.reset_receipts)
