"""Faults outside our processes: a broker restart, killed PostgreSQL backends, a
database that refuses connections as a restarting server does."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from tests.harness import db
from tests.rabbit import RabbitNode


def restart_broker(node: RabbitNode, down_s: float = 2.0) -> None:
    """stop_app / start_app on the fault suite's own node: every connection drops,
    durable queues and persistent messages survive."""
    node.ctl("stop_app")
    try:
        time.sleep(down_s)
    finally:
        # Never leave the broker stopped: retry start_app a few times.
        for attempt in range(3):
            try:
                node.ctl("start_app")
                node.ctl("await_startup")
                break
            except subprocess.SubprocessError:
                if attempt == 2:
                    raise
                time.sleep(2)


def kill_backends(settings: Settings, pattern: str = "ledgerq-%") -> int:
    """pg_terminate_backend on every connection of the services: the relay, the
    workers and the reconciler (which runs in the test process, built by the
    composition root like the others); not the test's own (``ledgerq-test*``),
    and none on another database (another suite may be running beside this one)."""
    killed = 0
    for shard in settings.ledger_shards():  # every ledger shard's database
        with db(shard) as conn:
            rows = conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name LIKE %s AND application_name NOT LIKE 'ledgerq-test%%' "
                "AND datname = current_database() AND pid <> pg_backend_pid()",
                (pattern,),
            ).fetchall()
        killed += sum(1 for r in rows if r[0])
    return killed


def maintenance(settings: Settings) -> psycopg.Connection[tuple[Any, ...]]:
    """A connection to the server's ``postgres`` database (not the suite's own)."""
    url = make_url(settings.database_url).set(database="postgres")
    return psycopg.connect(libpq_url(url.render_as_string(hide_password=False)), autocommit=True)


@contextmanager
def database_down(settings: Settings) -> Iterator[None]:
    """The suite's database as a restart leaves it: every backend of the services
    terminated (the test's own ``ledgerq-test*`` connections excepted), and new
    connections refused until the block ends (then allowed again, whatever happened)."""
    name = make_url(settings.database_url).database
    assert name and name != "postgres"
    with maintenance(settings) as conn:
        conn.execute(
            sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS false").format(sql.Identifier(name))
        )
        try:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND application_name NOT LIKE 'ledgerq-test%%'",
                (name,),
            )
            yield
        finally:
            conn.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS true").format(sql.Identifier(name))
            )
