"""ledgerq through PgBouncer in transaction pooling mode (a real PgBouncer, started here).

With ``LEDGERQ_DATABASE_POOLER=transaction`` every connection ledgerq opens to
``LEDGERQ_DATABASE_URL`` sends no startup options and prepares nothing on the
server; what needs a session (LISTEN, the reconciler's advisory lock,
migrations) goes to ``LEDGERQ_DIRECT_DATABASE_URL``, or, for LISTEN only,
is done without (polling). Left at its default behind such a pooler, ledgerq
stops at start with the setting that fixes it. The pooler here has fewer server
connections than ledgerq opens clients, so each test multiplexes for real.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from ledgerq import Registry, TaskContext, TaskSpec, enqueue
from ledgerq.compose import open_reconciler
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError
from ledgerq.ledger.pg.engines import check_database, sync_engine
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.pg.notify import Wakeup
from tests import pgbouncer, rabbit
from tests.harness import EFFECTS_DDL, Pipeline, db, effects, enqueue_committed
from tests.pgbouncer import POOL_SIZE, PgBouncer
from tests.support import ledgerq


@pytest.fixture(scope="module")
def bouncer(base_settings: Settings) -> Iterator[PgBouncer]:
    if not pgbouncer.available():
        pytest.fail("these tests need PgBouncer installed (scripts/test.sh installs it)")
    home = rabbit.workdir("ledgerq-pgbouncer-")
    started = PgBouncer(home, base_settings.database_url).start()
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def pooled(settings: Settings, bouncer: PgBouncer) -> Settings:
    """The test's settings with the ledger reached through PgBouncer, and a direct URL."""
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    return replace(
        settings,
        database_url=bouncer.url(),
        database_pooler="transaction",
        direct_database_url=settings.database_url,
    )


def _test_database_pools(bouncer: PgBouncer, settings: Settings) -> dict[str, int]:
    name = settings.database_url.rsplit("/", 1)[-1]
    [pool] = [p for p in bouncer.show("POOLS") if p["database"] == name]
    clients = sum(int(pool[k]) for k in ("cl_active", "cl_waiting"))
    servers = sum(int(pool[k]) for k in ("sv_active", "sv_idle", "sv_used", "sv_tested"))
    return {"clients": clients, "servers": servers}


async def test_the_pipeline_runs_through_a_transaction_pooler(
    pooled: Settings, bouncer: PgBouncer
) -> None:
    registry = Registry()

    @registry.task("t.write")
    def write(payload: Any, ctx: TaskContext) -> None:
        ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:id, :attempt)"),
            {"id": ctx.id, "attempt": ctx.attempt},
        )

    # A producer's own engine behind the pooler: enqueue in its business transaction,
    # many times over one connection (psycopg would prepare from the fifth on).
    producer = sync_engine(pooled, "test-producer", pool_size=1)
    with Session(producer) as session, session.begin():
        ids = [enqueue(session, "t.write", {"n": n}) for n in range(40)]
    producer.dispose()
    ids += enqueue_committed(pooled, [TaskSpec("t.write", {"n": n}) for n in range(160)])

    async with Pipeline(pooled, registry) as pipe:
        done = await pipe.settle(ids, timeout=60)
        multiplexed = _test_database_pools(bouncer, pooled)  # the pools have filled by now

    assert set(done.values()) == {"succeeded"}
    assert sorted(task for task, _ in effects(pooled)) == sorted(ids)  # each exactly once
    # More ledgerq clients than server connections: they really shared them.
    assert multiplexed["clients"] > POOL_SIZE >= multiplexed["servers"], multiplexed
    assert "prepared statement" not in bouncer.log()


async def test_the_reconciler_holds_its_lock_on_the_direct_connection(pooled: Settings) -> None:
    async with open_reconciler(pooled) as first, open_reconciler(pooled) as second:
        async with first.ledger.exclusive() as got:
            assert got
            # The other reconciler sees the lock held, each time, although its own
            # statements land on whichever of the few pooled server connections is free
            # (a lock taken through the pooler would be re-entered on the one holding it).
            for _ in range(5):
                assert (await second.run_once()).acted is False
        # Released on the session it was taken on, so nothing holds it any more.
        for _ in range(3):
            assert (await second.run_once()).acted is True


async def test_listen_uses_the_direct_connection_and_polling_without_one(
    pooled: Settings,
) -> None:
    direct, polling = Wakeup(pooled), Wakeup(replace(pooled, direct_database_url=None))
    direct.start()
    polling.start()
    try:
        # settled: the direct listener connected (its first event); the polling one
        # starts no listener at all
        assert await direct.wait(30.0), "the direct listener never connected"
        direct.event.clear()
        enqueue_committed(pooled, [TaskSpec("t.write", {})])
        assert await direct.wait(10.0), "no NOTIFY reached the direct listener"
        assert not await polling.wait(1.0), "a listener through the pooler would miss events"
    finally:
        await direct.stop()
        await polling.stop()


async def test_what_needs_a_session_refuses_without_the_direct_url(pooled: Settings) -> None:
    without = replace(pooled, direct_database_url=None)
    with pytest.raises(ConfigError, match="LEDGERQ_DIRECT_DATABASE_URL"):
        async with open_reconciler(without):
            pass
    with pytest.raises(ConfigError, match="LEDGERQ_DIRECT_DATABASE_URL"):
        upgrade(without)
    upgrade(pooled)  # with it, migrations run on the direct connection (already at head)


def test_the_default_behind_a_pooler_stops_at_start_with_the_setting_to_change(
    pooled: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    default = replace(pooled, database_pooler="none", direct_database_url=None)
    with pytest.raises(ConfigError, match="LEDGERQ_DATABASE_POOLER=transaction"):
        check_database(default)
    done = ledgerq(default, "stats")
    assert done.returncode == 78, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ledgerq: ") and "LEDGERQ_DATABASE_POOLER=transaction" in line
    check_database(pooled)  # the same pooler, told what it is: fine, with a hint
    # The test server's role has no statement_timeout, which ledgerq cannot set there.
    assert any("statement_timeout is off for this role" in r.message for r in caplog.records)
