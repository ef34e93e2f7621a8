"""The Celery side of ``ledgerq bench --peer celery``: one task that writes one row.

Run by ``celery -A ledgerq.bench.celery_app worker`` in a process of its own; it
reads its broker, queue and database from the environment the bench sets
(``LEDGERQ_BENCH_CELERY_*``). Configured as a Celery user who wants ledgerq's
delivery guarantee would: ``acks_late`` (the ack follows the task), prefetch
multiplier 1, the prefork pool. Each task inserts one row in its own
transaction (psycopg, autocommit), as a ledgerq handler writes one row.
"""

from __future__ import annotations

import os
from typing import Any

import psycopg
from celery import Celery  # type: ignore[import-untyped]

from ledgerq.bench.peer_sql import Q

QUEUE = os.environ.get("LEDGERQ_BENCH_CELERY_QUEUE", "ledgerq-bench-celery")
INSERT = Q.insert.text

app = Celery("ledgerq_bench", broker=os.environ.get("LEDGERQ_BENCH_CELERY_BROKER", "amqp://"))
app.conf.update(
    task_acks_late=True,
    worker_prefetch_multiplier=1,
    task_default_queue=QUEUE,
    task_ignore_result=True,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_conn: psycopg.Connection[Any] | None = None


def _connection() -> psycopg.Connection[Any]:
    """One connection per prefork child, opened on its first task."""
    global _conn
    if _conn is None or _conn.closed:
        _conn = psycopg.connect(os.environ["LEDGERQ_BENCH_CELERY_DB"], autocommit=True)
    return _conn


@app.task(name="bench.write")  # type: ignore[untyped-decorator]
def write(n: int) -> None:
    _connection().execute(INSERT, {"n": n})
