"""Handlers that outlive their timeout: ``ledgerq worker --app tests.apps.overlap_app``.

Each records its attempts in ``test_attempts`` through a connection of its own
(autocommit, never ``ctx.session``, whose writes a lost fence rolls back): one
row when an attempt starts and its ``ended_at`` when the attempt's code returns,
both on the database's clock, so a test can tell whether two attempts of a task
ever ran at once. ``payload["seconds"]`` is how long an attempt sleeps, far past
its 1 s timeout; with ``payload["first_only"]`` only the task's first run sleeps
(a rescue may give back an attempt uncharged, so attempt numbers can repeat).
"""

from __future__ import annotations

import os
import time
from typing import Any

import psycopg

from ledgerq import TaskContext, task
from ledgerq.ledger.pg.engines import libpq_url

ATTEMPTS_DDL = """CREATE TABLE IF NOT EXISTS test_attempts (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL,
    started_at timestamptz NOT NULL, ended_at timestamptz)"""


def _connect() -> psycopg.Connection[tuple[Any, ...]]:
    return psycopg.connect(libpq_url(os.environ["LEDGERQ_DATABASE_URL"]), autocommit=True)


@task("test.overrun", timeout=1)
def overrun(payload: Any, ctx: TaskContext) -> None:
    """Ignores its timeout (never looks at ``ctx.lost``): sleeps, then returns."""
    with _connect() as conn:
        row = conn.execute(
            "INSERT INTO test_attempts (task_id, attempt, pid, started_at) "
            "VALUES (%s, %s, %s, clock_timestamp()) RETURNING id",
            (ctx.id, ctx.attempt, os.getpid()),
        ).fetchone()
        assert row is not None
        runs = conn.execute("SELECT count(*) FROM test_attempts WHERE task_id = %s", (ctx.id,))
        if not payload.get("first_only") or runs.fetchone() == (1,):
            time.sleep(float(payload["seconds"]))
        conn.execute("UPDATE test_attempts SET ended_at = clock_timestamp() WHERE id = %s", row)
