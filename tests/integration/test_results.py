"""result() and aresult() on the real pipeline: a producer waits for its task's end.

The handlers are ``tests.apps.results_app``'s. A waiter is woken by the
``ledgerq_ended`` notification of the statement that ended its task, with its
registry's polling behind it: the PgBouncer test shows polling alone finds the
end where LISTEN cannot work.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from sqlalchemy import create_engine, make_url
from sqlalchemy.ext.asyncio import AsyncSession, create_async_engine
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from ledgerq import (
    MAX_PAYLOAD_BYTES,
    Action,
    Shards,
    TaskFilter,
    TaskNotFoundError,
    TaskSpec,
    aresult,
    enqueue,
    enqueue_many,
    list_tasks,
    result,
)
from ledgerq.consumers.registry import default_registry
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.waiters import _REGISTRIES, APPLICATION_NAME
from ledgerq.ledger.pg.waiters import registry as registries
from tests import pgbouncer, rabbit
from tests.apps import results_app
from tests.harness import Pipeline, enqueue_committed
from tests.pgbouncer import PgBouncer
from tests.shard_dbs import create_shards
from tests.support import ledgerq


@contextlib.asynccontextmanager
async def running(settings: Settings) -> AsyncIterator[Pipeline]:
    """The relay and a worker, the relay stepping in the background."""
    assert results_app.echo is not None  # the app's kinds are in the default registry
    async with Pipeline(settings, default_registry) as pipe:

        async def relay() -> None:
            while True:
                await pipe.relay.run_once()
                await asyncio.sleep(0.02)

        stepping = asyncio.create_task(relay())
        try:
            yield pipe
        finally:
            stepping.cancel()
            await asyncio.gather(stepping, return_exceptions=True)


def registry_backends(settings: Settings) -> set[int]:
    """The server pids of the result() registries' connections to the test database."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE application_name = %s AND datname = current_database()",
            (APPLICATION_NAME,),
        ).fetchall()
    return {int(pid) for (pid,) in rows}


def cancel(settings: Settings, ids: list[int]) -> None:
    engine = create_engine(settings.database_url)
    with Session(engine) as session, session.begin():
        from ledgerq import act

        act(session, Action.cancel(), TaskFilter(ids=tuple(ids)), actor="test")
    engine.dispose()


async def test_a_waiter_gets_the_value_the_error_and_the_times(settings: Settings) -> None:
    ok, failed = enqueue_committed(
        settings,
        [TaskSpec("res.echo", {"value": {"n": 42}}), TaskSpec("res.fail", max_attempts=1)],
    )
    engine = create_engine(settings.database_url)
    aengine = create_async_engine(settings.database_url)
    try:
        async with running(settings):
            got = await aresult(aengine, ok, timeout=60)
            dead = await asyncio.to_thread(result, engine, failed, timeout=60)
            with Session(engine) as session:  # a Session names the database too
                again = await asyncio.to_thread(result, session, ok, timeout=1)
            with psycopg.connect(libpq_url(settings.database_url)) as raw:  # a DB-API one
                raw_again = await asyncio.to_thread(result, raw, ok, timeout=1)
    finally:
        engine.dispose()
        await aengine.dispose()

    assert (got.status, got.value, got.error, got.attempts) == ("succeeded", {"n": 42}, None, 1)
    assert got.created_at <= got.started_at <= got.finished_at  # type: ignore[operator]
    assert (dead.status, dead.value, dead.succeeded) == ("dead", None, False)
    assert dead.error is not None and "it failed" in dead.error
    assert again == got and raw_again == got


async def test_every_bind_enqueue_takes_names_the_database_to_wait_on(
    settings: Settings,
) -> None:
    """result() and aresult() take what enqueue() and aenqueue() take (and engines, a
    URL): each bind below finds the same ended task."""
    [task] = enqueue_committed(settings, [TaskSpec("res.echo")])
    await asyncio.to_thread(cancel, settings, [task])
    url = settings.database_url
    engine = create_engine(url)
    aengine = create_async_engine(url)

    def sync_binds() -> dict[str, str]:
        found: dict[str, str] = {}
        with engine.connect() as conn, Session(engine) as session:
            scoped = scoped_session(sessionmaker(engine))
            with psycopg.connect(libpq_url(url)) as raw:
                for name, bind in (
                    ("Engine", engine), ("Connection", conn), ("Session", session),
                    ("scoped_session", scoped), ("psycopg.Connection", raw),
                    ("str", url), ("URL", make_url(url)),
                ):  # fmt: skip
                    found[name] = result(bind, task, timeout=5).status
            scoped.remove()
        return found

    try:
        found = await asyncio.to_thread(sync_binds)
        async with (
            aengine.connect() as aconn,
            AsyncSession(aengine) as asession,
            await psycopg.AsyncConnection.connect(libpq_url(url)) as araw,
        ):
            for name, abind in (
                ("AsyncEngine", aengine), ("AsyncConnection", aconn),
                ("AsyncSession", asession), ("psycopg.AsyncConnection", araw),
            ):  # fmt: skip
                found[name] = (await aresult(abind, task, timeout=5)).status
    finally:
        engine.dispose()
        await aengine.dispose()
    assert found == dict.fromkeys(found, "cancelled") and len(found) == 11
    with pytest.raises(TypeError, match="result\\(\\) takes what enqueue\\(\\) takes"):
        result(object(), task, timeout=1)


async def test_a_result_over_the_limit_ends_the_task_dead_with_the_limit_named(
    settings: Settings,
) -> None:
    [big] = enqueue_committed(settings, [TaskSpec("res.big", {"bytes": MAX_PAYLOAD_BYTES + 1})])
    async with running(settings):
        got = await aresult(settings.database_url, big, timeout=60)
    assert (got.status, got.value, got.attempts) == ("dead", None, 1)
    assert got.error is not None and f"the limit is {MAX_PAYLOAD_BYTES} because" in got.error
    assert "stored in the task's ledger row" in got.error  # why, not only how much


async def test_the_timeout_passes_with_a_timeout_error_and_zero_looks_once(
    settings: Settings,
) -> None:
    [waiting] = enqueue_committed(settings, [TaskSpec("res.echo")])  # no worker runs it
    with pytest.raises(TimeoutError, match=f"task {waiting} did not end"):
        await aresult(settings.database_url, waiting, timeout=0.2)
    with pytest.raises(TimeoutError):
        await asyncio.to_thread(result, settings.database_url, waiting, timeout=0)
    # timeout=0 looks once: an ended task is returned, not a timeout
    await asyncio.to_thread(cancel, settings, [waiting])
    assert (await aresult(settings.database_url, waiting, timeout=0)).status == "cancelled"
    assert (await asyncio.to_thread(result, settings.database_url, waiting, timeout=0)).done


async def test_an_unknown_or_purged_task_is_a_typed_error_not_a_hang(
    settings: Settings, ledger: PgLedger
) -> None:
    [gone] = enqueue_committed(settings, [TaskSpec("res.echo")])
    await asyncio.to_thread(cancel, settings, [gone])
    assert (await aresult(settings.database_url, gone, timeout=5)).status == "cancelled"
    later = datetime.now(UTC) + timedelta(days=1)
    assert await ledger.purge_history_batch("cancelled", later, 100) == 1

    with pytest.raises(TaskNotFoundError, match="purged"):
        await aresult(settings.database_url, gone, timeout=None)  # no timeout: still no hang
    with pytest.raises(TaskNotFoundError, match="commit before waiting"):
        engine = create_engine(settings.database_url)
        try:
            with Session(engine) as session, session.begin():
                uncommitted = enqueue(session, "res.echo")
                await asyncio.to_thread(result, session, uncommitted, timeout=5)
        finally:
            engine.dispose()


async def test_a_thousand_waiters_share_one_connection_and_all_return(
    settings: Settings,
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("res.echo")] * 1000)
    url = settings.database_url
    before = await asyncio.to_thread(registry_backends, settings)
    registry = registries(libpq_url(url), 60.0)  # (the waiters'; poll_s=60 if it is new)
    reads = registry.reads
    waiters = [asyncio.ensure_future(aresult(url, i, timeout=60, poll_s=60)) for i in ids]
    while registry.reads == reads:  # the waiters' first read is done: the connection is up
        await asyncio.sleep(0.01)
    during = await asyncio.to_thread(registry_backends, settings)
    assert len(during - before) <= 1 and len(during) <= len(before) + 1  # one, not 1,000
    await asyncio.to_thread(cancel, settings, ids)
    results = await asyncio.gather(*waiters)

    assert [r.id for r in results] == ids
    assert {r.status for r in results} == {"cancelled"}
    assert _REGISTRIES[libpq_url(url)] is registry
    # woken (poll_s=60 is longer than the test): one read per notification or
    # batch of new waiters, not one per waiter
    assert registry.notifications >= 1
    assert registry.reads < len(ids)


async def test_a_callback_reads_its_childrens_results_a_page_at_a_time(
    settings: Settings,
) -> None:
    [parent] = enqueue_committed(settings, [TaskSpec("res.parent", {"n": 20})])
    async with running(settings) as pipe:
        await aresult(settings.database_url, parent, timeout=60)

        async def callback() -> int:
            while True:
                engine = create_engine(settings.database_url)
                with Session(engine) as session:
                    found = list_tasks(session, TaskFilter(kind="res.join"))
                engine.dispose()
                if found:
                    return int(found[0]["id"])
                await asyncio.sleep(0.05)

        join = await asyncio.wait_for(callback(), 60)
        got = await aresult(settings.database_url, join, timeout=60)
        await pipe.settle([join])
    assert got.value == {
        "sum": sum(i * i for i in range(20)),
        "count": 20,
        "statuses": ["succeeded"],
        "pages": 3,
    }


@pytest.fixture
def shard_settings(base_settings: Settings) -> Settings:
    return create_shards(base_settings, 2, tag="r")


async def test_with_ledger_shards_the_router_finds_each_tasks_database(
    shard_settings: Settings,
) -> None:
    shards = Shards(shard_settings)
    ids: list[int] = []
    try:
        for _ in range(4):  # no shard key: the shards in turn
            with Session(shards.engine_for(None)) as session, session.begin():
                ids.append(shards.enqueue(session, None, "res.echo"))
        assert {i >> 48 for i in ids} == {0, 1}  # both shards hold some
        waiters = [asyncio.ensure_future(aresult(shards, i, timeout=60)) for i in ids]
        for k, url in enumerate(shard_settings.database_urls):
            mine = [i for i in ids if i >> 48 == k]
            await asyncio.to_thread(cancel, Settings(database_url=url), mine)
        results = await asyncio.gather(*waiters)
        assert [(r.id, r.status) for r in results] == [(i, "cancelled") for i in ids]
        on_one = next(i for i in ids if i >> 48 == 1)
        with pytest.raises(TaskNotFoundError, match="ledger shard 1"):
            await aresult(shard_settings.database_urls[0], on_one, timeout=1)
    finally:
        shards.dispose()


@pytest.fixture(scope="module")
def bouncer(base_settings: Settings) -> Iterator[PgBouncer]:
    if not pgbouncer.available():
        pytest.fail("this test needs PgBouncer installed (scripts/test.sh installs it)")
    home = rabbit.workdir("ledgerq-pgbouncer-")
    started = PgBouncer(home, base_settings.database_url).start()
    try:
        yield started
    finally:
        started.stop()
        shutil.rmtree(home, ignore_errors=True)


async def test_through_transaction_pooling_polling_finds_the_end(
    settings: Settings, bouncer: PgBouncer
) -> None:
    engine = create_engine(settings.database_url)
    with Session(engine) as session, session.begin():
        [task] = enqueue_many(session, [TaskSpec("res.echo")])
    engine.dispose()
    registry = registries(libpq_url(bouncer.url()), 0.2)  # (the waiter's own)
    reads = registry.reads
    waiting = asyncio.ensure_future(aresult(bouncer.url(), task, timeout=60, poll_s=0.2))
    while registry.reads == reads:  # its first read found the task live
        await asyncio.sleep(0.01)
    assert not waiting.done()  # so a later read finds the end: LISTEN cannot work here
    await asyncio.to_thread(cancel, settings, [task])
    assert (await waiting).status == "cancelled"


async def test_a_waiter_outlives_its_registrys_lost_connection(settings: Settings) -> None:
    [task] = enqueue_committed(settings, [TaskSpec("res.echo")])
    registry = registries(libpq_url(settings.database_url), 1.0)  # (the waiter's own)
    waiting = asyncio.ensure_future(aresult(settings.database_url, task, timeout=60))
    reads = registry.reads

    async def terminated() -> int:
        with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s AND datname = current_database()",
                (APPLICATION_NAME,),
            ).fetchone()
        return int(row[0]) if row else 0

    while registry.reads == reads:  # the waiter's first read is done: the connection is up
        await asyncio.sleep(0.01)
    assert await terminated() >= 1  # (earlier tests' registries' too, for other URLs)
    await asyncio.to_thread(cancel, settings, [task])  # while it reconnects, or after
    assert (await waiting).status == "cancelled"
    assert registry.outage.outages >= 1


def test_bench_results_prints_the_latency_figure(settings: Settings) -> None:
    done = ledgerq(settings, "bench", "--results", "50", "--json")
    assert done.returncode == 0, done.stderr
    figure = json.loads(done.stdout)["results"]
    assert figure["waiters"] == 50 and figure["batch"] == 10
    assert 0 <= figure["p50_ms"] <= figure["p90_ms"] <= figure["p99_ms"] <= figure["max_ms"]
    assert figure["finish_p50_ms"] > 0
    assert figure["reads"] >= 1
