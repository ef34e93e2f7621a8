"""Ledger shards: each database records which shard of the ledger it is.

``ledgerq_ledger_shard`` holds at most one row, written by ``ledgerq migrate``
(never by this migration): the database's position in ``LEDGERQ_DATABASE_URL``
(``shard_index``) and how many databases the list had (``shard_count``). Every
service checks at start that the database at position k says (k, n), so a
reordered or wrong URL list stops it with one line instead of misrouting
tasks. ``migrate`` also gives shard k's id sequence the range of shard k
(:mod:`ledgerq.ledger.split.ids`); shard 0's range is today's, so this
migration changes nothing for a ledger in one database.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


#: Records (or confirms) the database's shard and narrows the id sequence to the
#: shard's range, atomically. Returns the index recorded before the call (NULL:
#: none); when that differs from ``p_index`` nothing is changed (the caller
#: refuses: a database never changes shard, its ids carry the old one). The
#: sequence restarts past every id of the range already used, so narrowing never
#: hands out an id twice.
ASSIGN = """
CREATE FUNCTION ledgerq_assign_shard(p_index integer, p_count integer, p_first bigint,
                                     p_last bigint)
RETURNS integer LANGUAGE plpgsql AS $fn$
DECLARE
    recorded integer;
    used bigint;
    seq_last bigint;
    seq_called boolean;
BEGIN
    LOCK TABLE ledgerq_ledger_shard IN EXCLUSIVE MODE;
    SELECT shard_index INTO recorded FROM ledgerq_ledger_shard;
    IF recorded IS NOT NULL AND recorded <> p_index THEN
        RETURN recorded;
    END IF;
    INSERT INTO ledgerq_ledger_shard (one, shard_index, shard_count)
    VALUES (true, p_index, p_count)
    ON CONFLICT (one) DO UPDATE SET shard_count = EXCLUDED.shard_count,
        assigned_at = CASE WHEN ledgerq_ledger_shard.shard_count = EXCLUDED.shard_count
                           THEN ledgerq_ledger_shard.assigned_at ELSE now() END;
    SELECT greatest(
        (SELECT max(id) FROM ledgerq_tasks WHERE id BETWEEN p_first AND p_last),
        (SELECT max(id) FROM ledgerq_history WHERE id BETWEEN p_first AND p_last),
        (SELECT max(task_id) FROM ledgerq_unique_keys WHERE task_id BETWEEN p_first AND p_last)
    ) INTO used;
    SELECT last_value, is_called INTO seq_last, seq_called FROM ledgerq_task_id_seq;
    IF seq_last BETWEEN p_first AND p_last THEN
        used := greatest(used, CASE WHEN seq_called THEN seq_last ELSE seq_last - 1 END);
    END IF;
    EXECUTE format(
        'ALTER SEQUENCE ledgerq_task_id_seq MINVALUE %s MAXVALUE %s START WITH %s RESTART WITH %s',
        p_first, p_last, p_first, greatest(p_first, coalesce(used, 0) + 1));
    RETURN recorded;
END
$fn$
"""


def upgrade() -> None:
    op.execute(
        """
        CREATE TABLE ledgerq_ledger_shard (
            one boolean NOT NULL DEFAULT true CHECK (one),
            shard_index integer NOT NULL CHECK (shard_index >= 0),
            shard_count integer NOT NULL CHECK (shard_index < shard_count),
            assigned_at timestamptz NOT NULL DEFAULT now(),
            CONSTRAINT ledgerq_ledger_shard_pk PRIMARY KEY (one)
        )
        """
    )
    op.execute(ASSIGN)


def downgrade() -> None:
    op.execute("DROP FUNCTION ledgerq_assign_shard(integer, integer, bigint, bigint)")
    op.execute("DROP TABLE ledgerq_ledger_shard")
    op.execute("ALTER SEQUENCE ledgerq_task_id_seq MINVALUE 1 NO MAXVALUE START WITH 1")
