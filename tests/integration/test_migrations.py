"""The shipped Alembic migrations go up, down and up again on a real database."""

from __future__ import annotations

from dataclasses import replace

import psycopg
from alembic import command
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import alembic_config, current_revision, head_revision, upgrade


def test_upgrade_downgrade_upgrade(base_settings: Settings) -> None:
    url = make_url(base_settings.database_url).set(database="ledgerq_test_migrations")
    settings = replace(base_settings, database_url=url.render_as_string(False))
    maintenance = libpq_url(url.set(database="postgres").render_as_string(False))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS ledgerq_test_migrations WITH (FORCE)"))
    upgrade(settings)  # creates the database too
    assert current_revision(settings) == head_revision()
    command.downgrade(alembic_config(settings.database_url), "base")
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        left = conn.execute("SELECT to_regclass('ledgerq_tasks'), to_regclass('ledgerq_history')")
        assert left.fetchone() == (None, None)
    upgrade(settings)
    assert current_revision(settings) == head_revision()
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE ledgerq_test_migrations WITH (FORCE)"))


def test_revisions_form_one_numbered_chain() -> None:
    """Each migration revises the one before it: no branches to merge later."""
    from ledgerq.ledger.pg.migrate import HISTORY

    chain = [s.revision for s in reversed(list(HISTORY.scripts().walk_revisions()))]
    assert chain == [f"{n:04d}" for n in range(1, len(chain) + 1)]
    assert head_revision() == chain[-1]
