"""Alembic environment for the ledger schema.

The URL comes from the Alembic config (set by :func:`ledger.migrate.upgrade`);
the migrations are plain DDL, so there is no metadata to compare against.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ledgerq.ledger.migrations import VERSION_TABLE

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:  # pragma: no cover - set by ledger.migrate
        raise RuntimeError("ledger migrations need sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(connection=connection, version_table=VERSION_TABLE)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
