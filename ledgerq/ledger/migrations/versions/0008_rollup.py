"""The dashboard's rollup: finished tasks counted per minute and per hour, and
their latencies as fixed log-scale histograms, so the overview never scans history.

- ``ledgerq_rollup_counts``: per (grain, at, queue, kind, status, error) the
  number of tasks that finished (``status`` one of succeeded, dead, cancelled;
  ``error`` the last line of a dead task's last error -- a traceback's
  exception line -- cut to 200 characters, '' for the others). ``grain`` is
  ``minute`` or ``hour``: each task is counted once in each, ``at`` being the
  UTC minute or hour of ``finished_at`` (the overview's 7-day window reads the
  hours: 60 times fewer rows).
- ``ledgerq_rollup_latency``: per (grain, at, queue, kind, hop, bucket) how
  many of those tasks took that long on that hop. Hops: ``due_publish`` (from
  when the last attempt became due, ``GREATEST(created_at, run_at)``, to its
  publication), ``publish_start`` (publication to claim), ``start_end`` (claim
  to finish, the handler's run) and ``total`` (enqueue commit to finish).
  Bucket ``b`` holds durations up to ``1 ms * 2 ** (b / 2)`` (bucket 0: under
  1 ms; the last, 47, everything from about 3.3 h up): see
  ``ledgerq/ledger/rollup.py``.
- ``ledgerq_rollup_state``: one row, ``rolled_upto``: every task that finished
  before it has been counted, none after it.

A pass reads history by finish time (each status's day partitions, then 0001's
``ledgerq_history_finished`` index): only the minutes since the last pass.
Rolled up by the reconciler's pass (``ledgerq/relay/rollup.py``). Small: rows
per minute and per hour bounded by the queue/kind/hop/bucket combinations seen,
whatever the throughput.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""

from __future__ import annotations

from ledgerq.ledger.migrations.steps import execute_all

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_UPGRADE = [
    """
    CREATE TABLE ledgerq_rollup_counts (
        grain  text        NOT NULL,
        at     timestamptz NOT NULL,
        queue  text        NOT NULL,
        kind   text        NOT NULL,
        status text        NOT NULL,
        error  text        NOT NULL DEFAULT '',
        n      bigint      NOT NULL,
        CONSTRAINT ledgerq_rollup_counts_pk PRIMARY KEY (grain, at, queue, kind, status, error),
        CONSTRAINT ledgerq_rollup_counts_grain CHECK (grain IN ('minute', 'hour'))
    )
    """,
    """
    CREATE TABLE ledgerq_rollup_latency (
        grain  text        NOT NULL,
        at     timestamptz NOT NULL,
        queue  text        NOT NULL,
        kind   text        NOT NULL,
        hop    text        NOT NULL,
        bucket smallint    NOT NULL,
        n      bigint      NOT NULL,
        CONSTRAINT ledgerq_rollup_latency_pk PRIMARY KEY (grain, at, queue, kind, hop, bucket),
        CONSTRAINT ledgerq_rollup_latency_grain CHECK (grain IN ('minute', 'hour'))
    )
    """,
    """
    CREATE TABLE ledgerq_rollup_state (
        id          smallint    NOT NULL DEFAULT 1,
        rolled_upto timestamptz,
        CONSTRAINT ledgerq_rollup_state_pk PRIMARY KEY (id),
        CONSTRAINT ledgerq_rollup_state_one CHECK (id = 1)
    )
    """,
    "INSERT INTO ledgerq_rollup_state (id, rolled_upto) VALUES (1, NULL)",
    # The three expressions the rollup and the overview's fresh tail share, written
    # once: the latency bucket of a duration, the hops of a finished task, the
    # error line dead tasks are grouped by.
    """
    CREATE FUNCTION ledgerq_latency_bucket(seconds double precision) RETURNS smallint
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CAST(LEAST(47, GREATEST(0,
            floor(2 * ln(GREATEST(seconds, 0.0001) / 0.001) / ln(2.0)) + 1)) AS smallint)
    $$
    """,
    """
    CREATE FUNCTION ledgerq_hops(created_at timestamptz, run_at timestamptz,
                                 published_at timestamptz, started_at timestamptz,
                                 finished_at timestamptz)
    RETURNS TABLE (hop text, seconds double precision)
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT x.hop, x.seconds FROM (VALUES
            ('due_publish', date_part('epoch', published_at - GREATEST(created_at, run_at))),
            ('publish_start', date_part('epoch', started_at - published_at)),
            ('start_end', date_part('epoch', finished_at - started_at)),
            ('total', date_part('epoch', finished_at - created_at))
        ) AS x(hop, seconds)
        WHERE x.seconds IS NOT NULL
    $$
    """,
    """
    CREATE FUNCTION ledgerq_error_line(status text, last_error text) RETURNS text
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
        SELECT CASE WHEN status = 'dead'
                    THEN left(regexp_replace(btrim(COALESCE(last_error, ''), E' \\n'),
                                             E'^.*\\n', ''), 200)
                    ELSE '' END
    $$
    """,
]

_DOWNGRADE = [
    "DROP FUNCTION ledgerq_error_line(text, text)",
    "DROP FUNCTION ledgerq_hops(timestamptz, timestamptz, timestamptz, timestamptz, timestamptz)",
    "DROP FUNCTION ledgerq_latency_bucket(double precision)",
    "DROP TABLE ledgerq_rollup_state",
    "DROP TABLE ledgerq_rollup_latency",
    "DROP TABLE ledgerq_rollup_counts",
]


def upgrade() -> None:
    execute_all(_UPGRADE)


def downgrade() -> None:
    execute_all(_DOWNGRADE)
