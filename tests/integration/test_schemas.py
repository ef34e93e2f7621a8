"""A ledger outside the ``public`` schema, end to end.

The database URL's own libpq ``options`` (``?options=-csearch_path%3Dlq_other``)
are merged with the ones ledgerq sets (its timeouts and planner settings), never
replaced, so every command works in the schema ``ledgerq migrate`` created the
ledger in: a producer's own engine, the relay and the worker as processes, the
reconciler, ``stats`` and ``show``. The test has a database of its own, so that
``public`` there can be checked empty.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import enqueue
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import connect_args, libpq_url
from tests.conftest import delete_broker_objects, drop_database, recreate_database, routed_queues
from tests.harness import EFFECTS_DDL, TERMINAL
from tests.support import ledgerq, spawn

SCHEMA = "lq_other"


@pytest.fixture
def other_schema(settings: Settings) -> Iterator[Settings]:
    """The test's settings on a database of its own whose URL puts everything in
    ``lq_other``: the schema exists, nothing is migrated yet."""
    base = make_url(settings.database_url)
    plain = base.set(database=f"{base.database}_schemas").render_as_string(False)
    recreate_database(plain)
    with psycopg.connect(libpq_url(plain), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {SCHEMA}")
    url = make_url(plain).update_query_dict({"options": f"-csearch_path={SCHEMA}"})
    current = replace(settings, database_url=url.render_as_string(False))
    try:
        yield current
    finally:
        try:
            routed = routed_queues(current)
        except psycopg.Error:  # never migrated: no subscriptions either
            routed = []
        delete_broker_objects(current, routed)
        drop_database(plain)


def _relations(settings: Settings, schema: str) -> list[str]:
    """Tables, views, sequences, indexes and functions in ``schema``."""
    plain = make_url(settings.database_url).difference_update_query(["options"])
    with psycopg.connect(libpq_url(plain.render_as_string(False))) as conn:
        rows = conn.execute(
            """SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
               WHERE n.nspname = %(s)s
               UNION ALL
               SELECT p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
               WHERE n.nspname = %(s)s""",
            {"s": schema},
        ).fetchall()
    return sorted(str(r[0]) for r in rows)


@pytest.fixture
async def services(other_schema: Settings) -> AsyncIterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    try:
        yield started
    finally:
        for process in started:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in started:
            try:
                await asyncio.to_thread(process.communicate, timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


def test_the_url_options_are_merged_with_ledgerqs_own() -> None:
    url = "postgresql+psycopg://postgres@127.0.0.1/x?options=-csearch_path%3Dshard0"
    settings = Settings(database_url=url, statement_timeout_ms=1500)
    options = connect_args(settings, "t", pooled=False, planner=("jit=off",))["options"]
    assert options.startswith("-csearch_path=shard0 ")  # theirs first ...
    assert "-c statement_timeout=1500" in options and options.endswith("-c jit=off")  # ... ours
    # Through a transaction pooler ledgerq adds nothing: the URL's own go as they are.
    assert "options" not in connect_args(settings, "t", pooled=True)


async def test_a_ledger_in_another_schema_works_end_to_end(
    other_schema: Settings, services: list[subprocess.Popen[str]]
) -> None:
    settings = other_schema
    migrated = ledgerq(settings, "migrate")
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute(EFFECTS_DDL)  # the handler's table, in lq_other too
        conn.execute("CREATE TABLE orders (id bigserial PRIMARY KEY, task_id bigint)")

    # A producer's own engine on the same URL: the business row and the task commit
    # together, both in lq_other.
    producer = create_engine(settings.database_url)
    try:
        with Session(producer) as session, session.begin():
            task_id = enqueue(session, "test.sync_write", {"order": 1})
            session.execute(text("INSERT INTO orders (task_id) VALUES (:id)"), {"id": task_id})
    finally:
        producer.dispose()

    services.append(spawn(settings, "relay"))
    services.append(spawn(settings, "worker", "--app", "tests.apps.slow_app"))
    status = await _settled(settings, task_id, services)
    assert status == "succeeded"

    reconciled = ledgerq(settings, "reconcile", "--json")
    assert reconciled.returncode == 0, reconciled.stderr
    stats = ledgerq(settings, "stats", "--json")
    assert stats.returncode == 0, stats.stderr
    shown = ledgerq(settings, "show", str(task_id), "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["status"] == "succeeded"

    ours = _relations(settings, SCHEMA)
    for name in ("ledgerq_tasks", "ledgerq_history", "ledgerq_alembic_version", "ledgerq_pick"):
        assert name in ours
    assert _relations(settings, "public") == []
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        done = conn.execute(f"SELECT task_id, attempt FROM {SCHEMA}.test_effects").fetchall()
    assert done == [(task_id, 1)]


async def _settled(settings: Settings, task_id: int, services: list[subprocess.Popen[str]]) -> str:
    async with open_ledger(settings, "ledgerq-test", pool_size=1) as ledger:
        deadline = time.monotonic() + 60
        while True:
            status = (await ledger.whereabouts([task_id])).get(task_id)
            if status in TERMINAL:
                return str(status)
            exited = [p for p in services if p.poll() is not None]
            if exited or time.monotonic() > deadline:
                raise AssertionError(_outputs(status, services))
            await asyncio.sleep(0.1)


def _outputs(status: Any, services: list[subprocess.Popen[str]]) -> str:
    for process in services:
        if process.poll() is None:
            process.kill()
    outputs = [process.communicate(timeout=10)[0] for process in services]
    return f"the task is {status}; the services said:\n" + "\n---\n".join(outputs)
