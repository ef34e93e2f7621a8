"""``ledgerq migrate``: create the database if it is missing, then upgrade the schema."""

from __future__ import annotations

from importlib import resources

import psycopg
from alembic import command
from alembic.config import Config
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import ServiceUnavailableError
from ledgerq.ledger.pg.base import first_line
from ledgerq.ledger.pg.engines import display_url, libpq_url


def alembic_config(database_url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(resources.files("ledgerq.ledger") / "migrations"))
    # Alembic's config uses ConfigParser interpolation, so '%' must be doubled.
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def ensure_database(settings: Settings) -> bool:
    """Create the configured database if it does not exist; return whether it did."""
    url = make_url(settings.database_url)
    name = url.database
    if not name:
        return False
    maintenance = libpq_url(url.set(database="postgres").render_as_string(hide_password=False))
    try:
        with psycopg.connect(maintenance, autocommit=True, connect_timeout=5) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if exists:
                return False
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            return True
    except psycopg.errors.DuplicateDatabase:
        return False
    except psycopg.Error as exc:
        raise ServiceUnavailableError(
            "PostgreSQL", display_url(settings.database_url), first_line(exc)
        ) from exc


def upgrade(settings: Settings, revision: str = "head") -> None:
    ensure_database(settings)
    command.upgrade(alembic_config(settings.database_url), revision)


def current_revision(settings: Settings) -> str | None:
    try:
        with psycopg.connect(libpq_url(settings.database_url), connect_timeout=5) as conn:
            row = conn.execute(
                "SELECT to_regclass('ledgerq_alembic_version') IS NOT NULL"
            ).fetchone()
            if not row or not row[0]:
                return None
            version = conn.execute("SELECT version_num FROM ledgerq_alembic_version").fetchone()
            return str(version[0]) if version else None
    except psycopg.Error as exc:
        raise ServiceUnavailableError(
            "PostgreSQL", display_url(settings.database_url), first_line(exc)
        ) from exc
