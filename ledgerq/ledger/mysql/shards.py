"""Each MySQL / MariaDB database's ledger shard: recorded by ``ledgerq migrate``,
checked at start, as on PostgreSQL (:mod:`ledgerq.ledger.pg.shards`; the rules
in :mod:`ledgerq.ledger.split.identity`).

:func:`assign` runs in ``ledgerq migrate`` on shard ``k`` of ``n``: it records
(k, n) in ``ledgerq_ledger_shard`` and starts the hot table's ``AUTO_INCREMENT``
at shard k's range (:func:`ledgerq.ledger.split.ids.id_range`), past every id
of that range any table holds, so ``INSERT`` itself yields ids tagged with the
shard. What differs from PostgreSQL's sequence, and why it holds:

- MySQL has no sequence with a MAXVALUE: nothing stops a shard's ids at the end
  of its range (2**48 ids; a million a second for 8 years). Shard 0 of a
  one-database ledger has the range it always had.
- ``ALTER TABLE ... AUTO_INCREMENT`` is DDL: it commits, so the record and the
  counter are two steps, not one transaction. A named lock (``GET_LOCK``, per
  database) keeps two ``migrate`` runs from interleaving them; a crash between
  them leaves the shard recorded and the counter where it was, and running
  ``migrate`` again sets it (the step is idempotent).
- Restarts: InnoDB before MariaDB 10.2.4 and MySQL 8.0 reset the counter to the
  hot table's ``max(id) + 1`` at start, which for a shard k > 0 whose hot table
  had emptied would be shard 0's range. ledgerq needs MariaDB 10.6 or MySQL 8.0
  (:mod:`ledgerq.ledger.mysql.engines`), which persist the counter across
  restarts (MariaDB MDEV-6076, MySQL WL#6204), so the range survives them.
- ``TRUNCATE TABLE ledgerq_tasks`` resets the counter to 1 (a person's, never
  ledgerq's: the testing protocol deletes): run ``ledgerq migrate`` after one.

:func:`identity` reads what the database records, for the start check
(:func:`ledgerq.ledger.mysql.migrate.check_schema`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pymysql
from sqlalchemy import TextClause
from sqlalchemy import exc as sa_exc

from ledgerq.core.config import Settings
from ledgerq.core.errors import ServiceUnavailableError, first_line
from ledgerq.ledger.mysql.engines import SERVICE, sync_engine
from ledgerq.ledger.split.identity import Identity, refuse_reassignment
from ledgerq.ledger.split.ids import id_range
from ledgerq.ledger.sql import load

#: Seconds ``migrate`` waits for another ``migrate`` assigning the same database.
ASSIGN_WAIT_S = 60


@dataclass(frozen=True)
class ShardQueries:
    """``ledger/mysql/shards.sql``."""

    lock_assign: TextClause
    unlock_assign: TextClause
    shard_table_exists: TextClause
    shard_identity: TextClause
    record_shard: TextClause
    used_ids: TextClause
    start_ids: TextClause


SQ: ShardQueries = load(ShardQueries, "ledgerq.ledger.mysql", "shards.sql")


def identity(conn: pymysql.Connection[Any]) -> Identity:
    """What the database behind ``conn`` records (its table must exist)."""
    with conn.cursor() as cursor:
        cursor.execute(SQ.shard_identity.text)
        row = cursor.fetchone()
    return None if row is None else (int(row[0]), int(row[1]))


def assign(settings: Settings, index: int, count: int) -> None:
    """Record that ``settings``' database is shard ``index`` of ``count`` and start its
    ids in the shard's range (nothing to do before migration m0008 made the table)."""
    first, last = id_range(index)
    engine = sync_engine(settings, "ledgerq-migrate", pool_size=1)
    try:
        with engine.connect() as conn:
            if not conn.execute(SQ.shard_table_exists).scalar():
                return
            if conn.execute(SQ.lock_assign, {"wait_s": ASSIGN_WAIT_S}).scalar() != 1:
                raise ServiceUnavailableError(
                    SERVICE,
                    settings.database_url,
                    f"another `ledgerq migrate` held the database for {ASSIGN_WAIT_S} s",
                )
            try:
                conn.commit()
                row = conn.execute(SQ.shard_identity).first()
                recorded = None if row is None else int(row[0])
                refuse_reassignment(settings.database_url, index, recorded)
                params = {"shard_index": index, "shard_count": count}
                conn.execute(SQ.record_shard, params)
                used = conn.execute(SQ.used_ids, {"first_id": first, "last_id": last}).scalar()
                conn.commit()
                conn.execute(SQ.start_ids, {"next_id": max(first, int(used or 0) + 1)})
            finally:
                conn.rollback()
                conn.execute(SQ.unlock_assign)
    except sa_exc.DBAPIError as exc:
        reason = first_line(exc.orig or exc)
        raise ServiceUnavailableError(SERVICE, settings.database_url, reason) from exc
    finally:
        engine.dispose()
