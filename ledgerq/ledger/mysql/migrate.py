"""``ledgerq migrate`` on MySQL / MariaDB, and the schema check every other command
makes at start: as :mod:`ledgerq.ledger.pg.migrate`, with the MySQL revision
history (``ledger/mysql/migrations``), on every database of the list when the
ledger is split (ledger shards).

:func:`upgrade` checks each server (reachable, recent enough:
:func:`~ledgerq.ledger.mysql.engines.check_server`), creates the database if it
is missing (utf8mb4), runs Alembic up to the head, then records the database's
ledger shard and starts its ids in the shard's range
(:func:`~ledgerq.ledger.mysql.shards.assign`). :func:`check_schema`, on every
database: the server reachable and recent enough, the revision in the version
table this ledgerq's MySQL head, the hot and history tables present, the
database the shard its position in the list says
(:func:`~ledgerq.ledger.split.identity.check_identity`); anything else is a
:class:`~ledgerq.core.errors.SchemaError` (or ``ConfigError``) that says what to do.
"""

from __future__ import annotations

import pymysql
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.core.errors import SchemaError, ServiceUnavailableError, first_line
from ledgerq.ledger.migrations import VERSION_TABLE
from ledgerq.ledger.mysql.base import GRANTS, INSUFFICIENT_PRIVILEGE, error_number
from ledgerq.ledger.mysql.engines import SERVICE, check_server, connect_waiting, server_url
from ledgerq.ledger.mysql.shards import assign, identity
from ledgerq.ledger.revisions import History, check_shards
from ledgerq.ledger.split.identity import Identity, check_identity

#: Tables every ledgerq command relies on, besides the version table.
LEDGER_TABLES = ("ledgerq_tasks", "ledgerq_history")
#: What each database records of its ledger shard (migration m0008).
SHARD_TABLE = "ledgerq_ledger_shard"


HISTORY = History("ledgerq.ledger.mysql", "mysql+pymysql://", "MySQL ")
#: Alembic's configuration on a database URL.
alembic_config = HISTORY.config


def head_revision() -> str:
    """The revision this ledgerq's MySQL migrations end at."""
    return HISTORY.head()


def check_revision(revision: str) -> None:
    """Raise ValueError unless ``revision`` names one of the MySQL migrations (or head)."""
    HISTORY.check(revision)


def ensure_database(settings: Settings) -> bool:
    """Create the configured database if it does not exist; return whether it did."""
    name = make_url(settings.database_url).database
    if not name:
        return False
    server = server_url(settings.database_url).render_as_string(hide_password=False)
    check_server(settings, server)
    with connect_waiting(settings, server) as conn, conn.cursor() as cursor:
        cursor.execute("SELECT 1 FROM information_schema.schemata WHERE schema_name = %s", (name,))
        if cursor.fetchone():
            return False
        quoted = name.replace("`", "``")
        cursor.execute(f"CREATE DATABASE IF NOT EXISTS `{quoted}` CHARACTER SET utf8mb4")
        return True


def upgrade(settings: Settings, revision: str = "head") -> None:
    """Migrate every ledger shard's database to ``revision`` (each created if missing),
    and record each one's shard once it has the table (:func:`assign`)."""
    from alembic import command  # migrating only: the start check needs no Alembic

    check_revision(revision)
    count = settings.ledger_shard_count
    for index, shard in enumerate(settings.ledger_shards()):
        ensure_database(shard)
        command.upgrade(alembic_config(shard.database_url), revision)
        assign(shard, index, count)


def _state(settings: Settings) -> tuple[str | None, list[str], Identity]:
    """The recorded revision (None: never migrated), the ledger tables missing, and
    the ledger shard the database says it is (None: not recorded)."""
    try:
        with connect_waiting(settings) as conn:
            with conn.cursor() as cursor:
                cursor.execute(
                    "SELECT table_name FROM information_schema.tables "
                    "WHERE table_schema = DATABASE()"
                )
                present = {str(row[0]) for row in cursor.fetchall()}
                missing = [t for t in LEDGER_TABLES if t not in present]
                if VERSION_TABLE not in present:
                    return None, missing, None
                cursor.execute(f"SELECT version_num FROM {VERSION_TABLE}")
                row = cursor.fetchone()
            recorded = identity(conn) if SHARD_TABLE in present else None
            return (str(row[0]) if row else None), missing, recorded
    except pymysql.MySQLError as exc:
        if error_number(exc) in INSUFFICIENT_PRIVILEGE:
            raise SchemaError(f"{first_line(exc)}: {GRANTS}") from exc
        raise ServiceUnavailableError(SERVICE, settings.database_url, first_line(exc)) from exc


def current_revision(settings: Settings) -> str | None:
    """The revision the (first) database records, or None if it was never migrated."""
    return _state(settings.ledger_shard(0))[0]


def check_schema(settings: Settings) -> str:
    """The schema's revision if every ledger shard's server is recent enough and its
    database at this ledgerq's MySQL head with its tables in place, saying it is the
    shard at its position in the URL list; else the one-line error."""
    return check_shards(settings, _check_one)


def _check_one(settings: Settings, index: int, count: int) -> str:
    check_server(settings)
    current, missing, recorded = _state(settings)
    current = HISTORY.verdict(
        settings.database_url,
        current,
        missing,
        "a newer ledgerq migrated it, or it is a PostgreSQL revision?",
    )
    check_identity(settings.database_url, recorded, index, count)
    return current
