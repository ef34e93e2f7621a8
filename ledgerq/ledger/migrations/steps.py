"""What most of ledgerq's migrations are: a list of DDL statements up, and the
list that undoes it down, each run in order inside Alembic's transaction (a
migration is all or nothing: PostgreSQL's DDL is transactional)."""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op


def execute_all(statements: Sequence[str]) -> None:
    """Run each statement in order, on the migration's connection."""
    for statement in statements:
        op.execute(statement)
