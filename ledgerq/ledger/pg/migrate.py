"""``ledgerq migrate``, and the schema check every other command makes at start.

:func:`upgrade` creates the database if it is missing, then runs Alembic up to
the head. :func:`check_schema` is the start check of every command that needs
the ledger (``stats``, ``show``, ``relay``, ``worker``, ``reconcile``; ``demo``
and ``bench`` migrate first): PostgreSQL reachable within the connect wait, the
revision in ``ledgerq_alembic_version`` equal to this ledgerq's Alembic head
(read from the scripts without importing Alembic,
:meth:`~ledgerq.ledger.revisions.History.head`: only :func:`upgrade` and a
revision a person typed import it), and the hot and history tables present.
Anything else is a :class:`~ledgerq.core.errors.SchemaError` whose line says
what to do (run ``ledgerq migrate``, or upgrade ledgerq when the database is
newer than it).
A schema that disappears while a service runs is caught later, statement by
statement, as :class:`~ledgerq.core.errors.SchemaMissingError`
(:mod:`ledgerq.ledger.pg.base`).
"""

from __future__ import annotations

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError, SchemaError, ServiceUnavailableError
from ledgerq.ledger.migrations import VERSION_TABLE
from ledgerq.ledger.pg.base import GRANTS, first_line
from ledgerq.ledger.pg.engines import connect_waiting
from ledgerq.ledger.pg.shards import SHARD_TABLE, Identity, assign, check_identity, identity_of
from ledgerq.ledger.revisions import History, check_shards

#: Tables every ledgerq command relies on, besides the version table.
LEDGER_TABLES = ("ledgerq_tasks", "ledgerq_history")


HISTORY = History("ledgerq.ledger", "postgresql+psycopg://", "")
#: Alembic's configuration on a database URL.
alembic_config = HISTORY.config


def head_revision() -> str:
    """The revision this ledgerq's migrations end at."""
    return HISTORY.head()


def migration_url(settings: Settings) -> str:
    """Where migrations run: a session connection (DDL, Alembic's version table),
    so the direct URL when the ledger's own is a transaction pooler."""
    url = settings.session_database_url
    if url is None:
        raise ConfigError(
            "LEDGERQ_DATABASE_POOLER is transaction, so `ledgerq migrate` needs a session "
            "connection: set LEDGERQ_DIRECT_DATABASE_URL (PostgreSQL itself)"
        )
    return url


def ensure_database(settings: Settings) -> bool:
    """Create the configured database if it does not exist; return whether it did."""
    url = make_url(migration_url(settings))
    name = url.database
    if not name:
        return False
    maintenance = url.set(database="postgres").render_as_string(hide_password=False)
    try:
        with connect_waiting(settings, maintenance, autocommit=True) as conn:
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
        raise ServiceUnavailableError("PostgreSQL", settings.database_url, first_line(exc)) from exc


def check_revision(revision: str) -> None:
    """Raise ValueError unless ``revision`` names one of the migrations (or head)."""
    HISTORY.check(revision)


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Migrate every ledger shard's database (Alembic runs per database), and record
    each one's shard (:func:`~ledgerq.ledger.pg.shards.assign`) once it has the table."""
    from alembic import command  # migrating only: the start check needs no Alembic

    check_revision(revision)
    count = settings.ledger_shard_count
    for index, shard in enumerate(settings.ledger_shards()):
        ensure_database(shard)
        command.upgrade(alembic_config(migration_url(shard)), revision)
        assign(shard, migration_url(shard), index, count)


def _state(settings: Settings) -> tuple[str | None, list[str], Identity]:
    """The recorded revision (None: never migrated), the ledger tables missing, and
    the ledger shard the database says it is (None: not recorded)."""
    query = "SELECT " + ", ".join(["to_regclass(%s) IS NOT NULL"] * (2 + len(LEDGER_TABLES)))
    try:
        with connect_waiting(settings) as conn:
            present = conn.execute(query, (VERSION_TABLE, SHARD_TABLE, *LEDGER_TABLES)).fetchone()
            assert present is not None
            missing = [t for t, ok in zip(LEDGER_TABLES, present[2:], strict=True) if not ok]
            if not present[0]:
                return None, missing, None
            version = conn.execute(
                sql.SQL("SELECT version_num FROM {}").format(sql.Identifier(VERSION_TABLE))
            ).fetchone()
            identity = identity_of(conn) if present[1] else None
            return (str(version[0]) if version else None), missing, identity
    except psycopg.errors.InsufficientPrivilege as exc:
        raise SchemaError(f"{first_line(exc)}: {GRANTS}") from exc
    except psycopg.Error as exc:
        raise ServiceUnavailableError("PostgreSQL", settings.database_url, first_line(exc)) from exc


def current_revision(settings: Settings) -> str | None:
    """The revision the database records, or None if it was never migrated."""
    return _state(settings.ledger_shard(0))[0]


def check_schema(settings: Settings) -> str:
    """The schema's revision if every ledger shard's database is at this ledgerq's
    head with every table in place and says it is the shard at its position in the
    URL list; else :class:`SchemaError` (or :class:`ConfigError` for a database at
    the wrong position, :class:`ServiceUnavailableError`, or
    :class:`~ledgerq.core.errors.CredentialsRefusedError`)."""
    return check_shards(settings, _check_one)


def _check_one(settings: Settings, index: int, count: int) -> str:
    current, missing, identity = _state(settings)
    current = HISTORY.verdict(settings.database_url, current, missing)
    check_identity(settings.database_url, identity, index, count)
    return current
