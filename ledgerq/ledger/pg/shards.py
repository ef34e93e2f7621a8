"""Each database's ledger shard: recorded by ``ledgerq migrate``, checked at start.

:func:`assign` runs in ``ledgerq migrate`` on shard ``k`` of ``n``: it records
(k, n) in ``ledgerq_ledger_shard`` and narrows the id sequence to shard k's
range (:func:`ledgerq.ledger.split.ids.id_range`), in one transaction. A
database that already records another index is refused
(:class:`~ledgerq.core.errors.ConfigError`): its ids carry that index, and a
database never changes shard. The count may change (databases appended to the
list; keys then route anew, see docs/howto.md).

:func:`check_identity` is every service's start check (through
:func:`~ledgerq.ledger.pg.migrate.check_schema`): the database at position k
of ``LEDGERQ_DATABASE_URL`` must say (k, n). A reordered list, a database
missing from it or a wrong one is a one-line ConfigError, never silent
misrouting. A one-database ledger that ``migrate`` never assigned passes (a
ledger migrated by Alembic directly, as some tools do).
"""

from __future__ import annotations

from typing import Any

import psycopg
from sqlalchemy import create_engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.pool import NullPool

from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError, SchemaError, ServiceUnavailableError
from ledgerq.core.masking import mask_url
from ledgerq.ledger.pg.base import first_line
from ledgerq.ledger.split.ids import id_range
from ledgerq.ledger.sql import HQ

SHARD_TABLE = "ledgerq_ledger_shard"
#: (shard_index, shard_count) as a database records it; None: not recorded.
Identity = tuple[int, int] | None

_SETTING = "LEDGERQ_DATABASE_URL"


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
    if recorded is not None and recorded != index:
        raise ConfigError(
            f"{_SETTING} lists {mask_url(settings.database_url)} as ledger shard {index}, "
            f"but it is ledger shard {recorded} (its task ids say so): list the databases "
            "in their original order; a database never changes shard"
        )


def check_identity(url: str, identity: Identity, index: int, count: int) -> None:
    """Raise unless the database at ``url`` (position ``index`` of ``count``) says so."""
    where = mask_url(url)
    if identity is None:
        if count == 1:
            return
        raise SchemaError(
            f"{where} does not record which ledger shard it is: run `ledgerq migrate` "
            f"with the full {_SETTING} list"
        )
    if identity[0] != index:
        raise ConfigError(
            f"{_SETTING} lists {where} as ledger shard {index}, but it is ledger shard "
            f"{identity[0]} of {identity[1]}: restore the list's order (a reordered list "
            "would send tasks to the wrong database)"
        )
    if identity[1] != count:
        raise ConfigError(
            f"{_SETTING} lists {count} ledger shard(s), but {where} was migrated as shard "
            f"{index} of {identity[1]}: give every process the same list, and run "
            "`ledgerq migrate` after adding a database"
        )
