"""Retention: history partitioned by status and finish day; permanent de-duplication keys.

``ledgerq_history`` becomes a table partitioned ``BY LIST (status)``, each
terminal status sub-partitioned ``BY RANGE (finished_at)``, one partition per
UTC day (``ledgerq_history_<status>_p<YYYYMMDD>``), with a ``DEFAULT`` partition
at both levels (``ledgerq_history_other``, ``ledgerq_history_<status>_default``)
so an insert never fails for want of a partition. Retention then drops whole
days (a catalog change, whatever their size) and deletes in batches only what
is left in a boundary day or a default partition (docs/design.md, "History
partitioned for retention").

The upgrade is in place and keeps every row: the old table is renamed aside,
the new one is created with the old one's columns (``LIKE`` the existing
history, so columns added by any earlier migration come along, in order, with
their defaults), each of the old table's indexes (whoever added it) is
re-created on the new one under its name from its own definition, a day
partition is created for every (status, day) the old rows hold and for today
and the next three days, the rows are copied, and the old table dropped. The
downgrade does the same the other way (its indexes back, and the primary key).
The copy rewrites history once, under an exclusive lock: ``finish`` waits for
the migration to commit, up to its statement timeout (30 s by default; a
million rows took about 40 s on a loaded 2-core machine, docs/performance.md),
after which it fails as a transient error and the worker tries again.

PostgreSQL requires the partition key in any unique index of a partitioned
table, so ``id`` is no longer a primary key on its own; it keeps an index. Ids
stay unique because they come from one sequence, a task reaches history once
per life (``finish`` deletes it from the hot table in the same statement), and
a task that leaves history (the retry operation) is deleted from it.

Partitions are created and dropped at run time by three functions owned by the
migrator (``SECURITY DEFINER``, so the service and operator roles need only
``EXECUTE``, not ownership nor ``DELETE`` on history): ``ledgerq_history_add_day``
(creates a day, moving its rows out of the default partition first),
``ledgerq_history_drop_day`` (counts and drops a day, waiting at most 2 s for
its lock) and ``ledgerq_history_purge`` (deletes one batch of rows finished
before a time). Their names and the identifiers they build come from a
validated status and a date, never from free text.

``ledgerq_unique_keys`` holds the permanent de-duplication keys (``once=True``):
one row per (kind, business key), inserted in the producer's transaction with
``ON CONFLICT DO NOTHING``; retention never removes them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

_FUNCTIONS = [
    """
    CREATE FUNCTION ledgerq_history_partition(p_status text, p_day date) RETURNS text
    LANGUAGE plpgsql IMMUTABLE AS $$
    BEGIN
        IF p_status IS NULL OR p_status NOT IN ('succeeded', 'dead', 'cancelled') THEN
            RAISE EXCEPTION 'not a terminal status: %', p_status USING ERRCODE = '22023';
        END IF;
        IF p_day IS NULL THEN
            RETURN 'ledgerq_history_' || p_status;
        END IF;
        RETURN 'ledgerq_history_' || p_status || '_p' || to_char(p_day, 'YYYYMMDD');
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_history_add_day(p_status text, p_day date) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        parent text := ledgerq_history_partition(p_status, NULL);
        part text := ledgerq_history_partition(p_status, p_day);
        lo timestamptz := p_day::timestamp AT TIME ZONE 'UTC';
        hi timestamptz := (p_day + 1)::timestamp AT TIME ZONE 'UTC';
        moved bigint;
    BEGIN
        IF to_regclass(part) IS NOT NULL THEN
            RETURN NULL;
        END IF;
        BEGIN  -- another reconciler may be creating the same day
            EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS)',
                           part, parent);
        EXCEPTION WHEN duplicate_table THEN
            RETURN NULL;
        END;
        EXECUTE format('WITH moved AS (DELETE FROM %I WHERE finished_at >= %L AND '
                       'finished_at < %L RETURNING *) INSERT INTO %I SELECT * FROM moved',
                       parent || '_default', lo, hi, part);
        GET DIAGNOSTICS moved = ROW_COUNT;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I FOR VALUES FROM (%L) TO (%L)',
                       parent, part, lo, hi);
        RETURN moved;
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_history_drop_day(p_status text, p_day date) RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        part text := ledgerq_history_partition(p_status, p_day);
        n bigint;
    BEGIN
        IF to_regclass(part) IS NULL THEN
            RETURN NULL;
        END IF;
        -- Nothing is inserted into a past day; the drop waits at most 2 s for the
        -- lock on its status's table (finish holds it briefly while it inserts).
        EXECUTE format('SELECT count(*) FROM %I', part) INTO n;
        PERFORM set_config('lock_timeout', '2s', true);
        EXECUTE format('DROP TABLE %I', part);
        RETURN n;
    EXCEPTION WHEN undefined_table THEN  -- dropped meanwhile by another reconciler
        RETURN NULL;
    END
    $$
    """,
    """
    CREATE FUNCTION ledgerq_history_purge(p_status text, p_before timestamptz, p_limit integer)
    RETURNS bigint
    LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
    DECLARE
        n bigint;
    BEGIN
        PERFORM ledgerq_history_partition(p_status, NULL);
        WITH doomed AS (
            SELECT id FROM ledgerq_history
            WHERE status = p_status AND finished_at < p_before
            LIMIT p_limit
        ), gone AS (
            DELETE FROM ledgerq_history h USING doomed
            WHERE h.id = doomed.id AND h.status = p_status AND h.finished_at < p_before
            RETURNING 1
        )
        SELECT count(*) INTO n FROM gone;
        RETURN n;
    END
    $$
    """,
    # Only the roles granted EXECUTE (ledger/roles.sql) may run them.
    "REVOKE EXECUTE ON FUNCTION ledgerq_history_add_day(text, date) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION ledgerq_history_drop_day(text, date) FROM PUBLIC",
    "REVOKE EXECUTE ON FUNCTION ledgerq_history_purge(text, timestamptz, integer) FROM PUBLIC",
]

#: Re-creates every index of the table set aside (``ledgerq_history_unpartitioned``
#: going up, ``ledgerq_history_partitioned`` going down) on the new
#: ``ledgerq_history`` under its own name, from its definition (``pg_get_indexdef``),
#: dropping the old one first to free the name. Dropping a partitioned index drops
#: its partitions' indexes with it.
_MOVE_INDEXES = r"""
    DO $$
    DECLARE
        old regclass := coalesce(to_regclass('ledgerq_history_unpartitioned'),
                                 to_regclass('ledgerq_history_partitioned'));
        r record;
    BEGIN
        FOR r IN SELECT indexrelid::regclass::text AS name, pg_get_indexdef(indexrelid) AS def
                 FROM pg_index
                 WHERE indrelid = old
                 ORDER BY 1
        LOOP
            EXECUTE format('DROP INDEX %s', r.name);
            EXECUTE regexp_replace(r.def, ' ON (ONLY )?\S+ USING ', ' ON ledgerq_history USING ');
        END LOOP;
    END
    $$
"""

_UPGRADE = [
    # The old table steps aside, without the names the new one takes.
    "ALTER TABLE ledgerq_history RENAME TO ledgerq_history_unpartitioned",
    "ALTER TABLE ledgerq_history_unpartitioned DROP CONSTRAINT ledgerq_history_pk",
    "ALTER TABLE ledgerq_history_unpartitioned DROP CONSTRAINT ledgerq_history_status",
    """
    CREATE TABLE ledgerq_history (LIKE ledgerq_history_unpartitioned INCLUDING DEFAULTS,
        CONSTRAINT ledgerq_history_status
            CHECK (status IN ('succeeded', 'dead', 'cancelled'))
    ) PARTITION BY LIST (status)
    """,
    """CREATE TABLE ledgerq_history_succeeded PARTITION OF ledgerq_history
       FOR VALUES IN ('succeeded') PARTITION BY RANGE (finished_at)""",
    """CREATE TABLE ledgerq_history_dead PARTITION OF ledgerq_history
       FOR VALUES IN ('dead') PARTITION BY RANGE (finished_at)""",
    """CREATE TABLE ledgerq_history_cancelled PARTITION OF ledgerq_history
       FOR VALUES IN ('cancelled') PARTITION BY RANGE (finished_at)""",
    "CREATE TABLE ledgerq_history_other PARTITION OF ledgerq_history DEFAULT",
    "CREATE TABLE ledgerq_history_succeeded_default PARTITION OF ledgerq_history_succeeded DEFAULT",
    "CREATE TABLE ledgerq_history_dead_default PARTITION OF ledgerq_history_dead DEFAULT",
    "CREATE TABLE ledgerq_history_cancelled_default PARTITION OF ledgerq_history_cancelled DEFAULT",
    # Partitioned indexes: every partition, present and future, gets its own. The
    # old table's indexes (0001's, and any a later migration added) move over under
    # their names; the id index stands in for the primary key.
    "CREATE INDEX ledgerq_history_id ON ledgerq_history (id)",
    _MOVE_INDEXES,
    *_FUNCTIONS,
    # A day for every (status, day) the old rows hold, and for today and the next days.
    """
    SELECT ledgerq_history_add_day(status, day) FROM (
        SELECT DISTINCT status, (finished_at AT TIME ZONE 'UTC')::date AS day
        FROM ledgerq_history_unpartitioned
        WHERE status IN ('succeeded', 'dead', 'cancelled') AND finished_at IS NOT NULL
        UNION
        SELECT s, (now() AT TIME ZONE 'UTC')::date + d
        FROM unnest(ARRAY['succeeded', 'dead', 'cancelled']) AS s,
             generate_series(0, 3) AS d
    ) AS days ORDER BY status, day
    """,
    "INSERT INTO ledgerq_history SELECT * FROM ledgerq_history_unpartitioned",
    "DROP TABLE ledgerq_history_unpartitioned",
    "ANALYZE ledgerq_history",
    # Permanent de-duplication keys (once=True): never removed by retention.
    """
    CREATE TABLE ledgerq_unique_keys (
        kind       text        NOT NULL,
        key        text        NOT NULL,
        task_id    bigint      NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        CONSTRAINT ledgerq_unique_keys_pk PRIMARY KEY (kind, key)
    )
    """,
]

_DOWNGRADE = [
    "DROP TABLE ledgerq_unique_keys",
    "ALTER TABLE ledgerq_history RENAME TO ledgerq_history_partitioned",
    "ALTER TABLE ledgerq_history_partitioned DROP CONSTRAINT ledgerq_history_status",
    "DROP INDEX ledgerq_history_id",
    """
    CREATE TABLE ledgerq_history (LIKE ledgerq_history_partitioned INCLUDING DEFAULTS,
        CONSTRAINT ledgerq_history_pk PRIMARY KEY (id),
        CONSTRAINT ledgerq_history_status
            CHECK (status IN ('succeeded', 'dead', 'cancelled'))
    )
    """,
    "INSERT INTO ledgerq_history SELECT * FROM ledgerq_history_partitioned",
    _MOVE_INDEXES,
    "DROP TABLE ledgerq_history_partitioned",  # and every partition with it
    "DROP FUNCTION ledgerq_history_purge(text, timestamptz, integer)",
    "DROP FUNCTION ledgerq_history_drop_day(text, date)",
    "DROP FUNCTION ledgerq_history_add_day(text, date)",
    "DROP FUNCTION ledgerq_history_partition(text, date)",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
