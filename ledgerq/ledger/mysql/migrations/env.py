"""Alembic environment for the MySQL / MariaDB ledger (set up by
:func:`ledgerq.ledger.mysql.migrate.upgrade`): plain DDL, no metadata."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

from ledgerq.ledger.migrations import VERSION_TABLE

config = context.config


def run_migrations_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    if url is None:  # pragma: no cover - set by ledger.mysql.migrate
        raise RuntimeError("ledger migrations need sqlalchemy.url")
    engine = create_engine(url)
    with engine.connect() as connection:
        context.configure(
            connection=connection, version_table=VERSION_TABLE, transactional_ddl=False
        )
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


run_migrations_online()
