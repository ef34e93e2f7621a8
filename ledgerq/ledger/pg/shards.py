"""Each database's ledger shard: recorded by ``ledgerq migrate``, checked at start.

:func:`assign` runs in ``ledgerq migrate`` on shard ``k`` of ``n``: it records
(k, n) in ``ledgerq_ledger_shard`` and narrows the id sequence to shard k's
range (:func:`ledgerq.ledger.split.ids.id_range`), in one transaction. A
database that already records another index is refused
(:func:`~ledgerq.ledger.split.identity.refuse_reassignment`): its ids carry
that index, and a database never changes shard. The count may change
(databases appended to the list; keys then route anew, see docs/howto.md).

:func:`~ledgerq.ledger.split.identity.check_identity` is every service's start
check (through :func:`~ledgerq.ledger.pg.migrate.check_schema`), the same on
MySQL / MariaDB.
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from ledgerq.core.config import Settings
from ledgerq.core.errors import ServiceUnavailableError
from ledgerq.ledger.pg.base import first_line
from ledgerq.ledger.split.identity import Identity, check_identity, refuse_reassignment
from ledgerq.ledger.split.ids import id_range
from ledgerq.ledger.sql import HQ

SHARD_TABLE = "ledgerq_ledger_shard"


def identity_of(conn: psycopg.Connection[Any]) -> Identity:
    """What the database behind ``conn`` records (its table must exist)."""
    row = conn.execute(HQ.shard_identity.text).fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def assign(settings: Settings, url: str, index: int, count: int) -> None:
    """Record that the database at ``url`` is shard ``index`` of ``count`` and narrow
    its id sequence (nothing to do before migration 0012 made the table)."""
    first, last = id_range(index)
    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            if not conn.execute(HQ.shard_table_exists).scalar():
                return
            recorded = conn.execute(
                HQ.assign_shard,
                {"shard_index": index, "shard_count": count, "first_id": first, "last_id": last},
            ).scalar()
    except sa_exc.DBAPIError as exc:
        raise ServiceUnavailableError("PostgreSQL", url, first_line(exc.orig or exc)) from exc
    finally:
        engine.dispose()
    refuse_reassignment(settings.database_url, index, recorded)


__all__ = ["SHARD_TABLE", "Identity", "assign", "check_identity", "identity_of"]
