"""Producers on a raw psycopg 3 connection (Django's, a plain psycopg app's), sync and async.

The task joins the caller's transaction: it exists once the caller commits,
never after a rollback; ``unique=True`` de-duplicates as on SQLAlchemy; and an
executor of the wrong kind is a ``TypeError`` naming what is accepted. Lookups
go through the storage seam, on connections of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from sqlalchemy.ext.asyncio import async_scoped_session, async_sessionmaker
from sqlalchemy.orm import Session, scoped_session, sessionmaker

from ledgerq import TaskNotFoundError, TaskSpec, aenqueue, aenqueue_many, enqueue, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine, libpq_url, sync_engine


async def exists(ledger: PgLedger, task_id: int) -> bool:
    try:
        await ledger.show(task_id)
    except TaskNotFoundError:
        return False
    return True


@pytest.fixture
def conn(settings: Settings) -> Iterator[psycopg.Connection[Any]]:
    """A plain psycopg connection, not in autocommit: statements open a transaction."""
    with psycopg.connect(libpq_url(settings.database_url)) as connection:
        yield connection


@pytest.fixture
async def aconn(settings: Settings) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(libpq_url(settings.database_url)) as c:
        yield c


async def test_a_task_enqueued_on_a_psycopg_connection_exists_once_the_caller_commits(
    conn: psycopg.Connection[Any], ledger: PgLedger
) -> None:
    due = datetime.now(UTC) + timedelta(hours=1)
    task_id = enqueue(
        conn, "mail.receipt", {"order": 7}, queue="mail", priority=4, run_at=due,
        business_key="order-7",
    )  # fmt: skip
    assert not await exists(ledger, task_id)  # not committed yet: invisible to others
    conn.commit()
    row = await ledger.show(task_id)
    assert (row["kind"], row["queue"], row["priority"], row["business_key"]) == (
        "mail.receipt", "mail", 4, "order-7",
    )  # fmt: skip
    assert row["payload"] == {"order": 7} and row["status"] == "pending"
    assert datetime.fromisoformat(row["run_at"]) == due


async def test_a_task_enqueued_on_a_psycopg_connection_is_gone_after_a_rollback(
    conn: psycopg.Connection[Any], ledger: PgLedger
) -> None:
    dropped = enqueue(conn, "mail.receipt", {"order": 1})
    conn.rollback()
    with pytest.raises(RuntimeError, match="business failed"), conn.transaction():
        in_block = enqueue(conn, "mail.receipt", {"order": 2})
        raise RuntimeError("business failed")
    assert not await exists(ledger, dropped)
    assert not await exists(ledger, in_block)
    assert (await ledger.stats())["total"] == 0


async def test_values_are_bound_never_spliced_into_the_sql(
    conn: psycopg.Connection[Any], ledger: PgLedger
) -> None:
    tricky = {"text": "100% off :kind %(kind)s '); DROP TABLE ledgerq_tasks; --"}
    task_id = enqueue(conn, "t.tricky", tricky, business_key="50% :dedupe_key")
    conn.commit()
    row = await ledger.show(task_id)
    assert row["payload"] == tricky and row["business_key"] == "50% :dedupe_key"


async def test_unique_de_duplicates_on_a_psycopg_connection(
    conn: psycopg.Connection[Any], ledger: PgLedger
) -> None:
    first = enqueue(conn, "t.unique", {"n": 1}, business_key="k", unique=True)
    again = enqueue(conn, "t.unique", {"n": 2}, business_key="k", unique=True)
    conn.commit()
    later = enqueue(conn, "t.unique", {"n": 3}, business_key="k", unique=True)
    other_key = enqueue(conn, "t.unique", {"n": 4}, business_key="k2", unique=True)
    conn.commit()
    assert first == again == later != other_key
    assert (await ledger.show(first))["payload"] == {"n": 1}
    assert (await ledger.stats())["total"] == 2


async def test_enqueue_many_on_a_psycopg_connection(
    conn: psycopg.Connection[Any], ledger: PgLedger
) -> None:
    [existing] = enqueue_many(conn, [TaskSpec("t.many", business_key="dup", unique=True)])
    ids = enqueue_many(
        conn,
        [
            TaskSpec("t.many", {"n": 0}, delay=30),
            TaskSpec("t.many", {"n": 1}, business_key="dup", unique=True),  # skipped
            TaskSpec("t.many", {"n": 2}, priority=9),
        ],
    )
    conn.commit()
    assert len(ids) == 2 and existing not in ids
    assert [(await ledger.show(i))["payload"] for i in ids] == [{"n": 0}, {"n": 2}]
    assert (await ledger.stats())["total"] == 3


async def test_the_connections_row_and_cursor_factories_do_not_matter(
    settings: Settings, ledger: PgLedger
) -> None:
    # A dict row factory (common in psycopg apps) and client-side binding cursors
    # (Django's default) are the caller's choices; enqueue works with both.
    url = libpq_url(settings.database_url)
    with psycopg.connect(url, row_factory=dict_row) as dicts:
        a = enqueue(dicts, "t.factories", {"via": "dict_row"})
        [b] = enqueue_many(dicts, [TaskSpec("t.factories", {"via": "dict_row, many"})])
    with psycopg.connect(url, cursor_factory=psycopg.ClientCursor) as client:
        c = enqueue(client, "t.factories", {"via": "ClientCursor"})
        d = enqueue(client, "t.factories", business_key="u", unique=True)
        assert enqueue(client, "t.factories", business_key="u", unique=True) == d
    for task_id in (a, b, c, d):  # the with blocks committed
        assert await exists(ledger, task_id)


async def test_a_task_enqueued_on_an_async_psycopg_connection_exists_once_committed(
    aconn: psycopg.AsyncConnection[Any], ledger: PgLedger
) -> None:
    task_id = await aenqueue(aconn, "t.async", {"n": 1}, delay=timedelta(minutes=5))
    [many] = await aenqueue_many(aconn, [TaskSpec("t.async", {"n": 2})])
    assert not await exists(ledger, task_id)
    await aconn.commit()
    assert (await ledger.show(task_id))["payload"] == {"n": 1}
    assert (await ledger.show(many))["payload"] == {"n": 2}


async def test_a_task_enqueued_on_an_async_psycopg_connection_is_gone_after_a_rollback(
    aconn: psycopg.AsyncConnection[Any], ledger: PgLedger
) -> None:
    dropped = await aenqueue(aconn, "t.async", {"n": 1})
    await aconn.rollback()
    with pytest.raises(RuntimeError, match="business failed"):
        async with aconn.transaction():
            [in_block] = await aenqueue_many(aconn, [TaskSpec("t.async", {"n": 2})])
            raise RuntimeError("business failed")
    assert not await exists(ledger, dropped)
    assert not await exists(ledger, in_block)
    assert (await ledger.stats())["total"] == 0


async def test_unique_de_duplicates_on_an_async_psycopg_connection(
    aconn: psycopg.AsyncConnection[Any], ledger: PgLedger
) -> None:
    first = await aenqueue(aconn, "t.unique", business_key="k", unique=True)
    await aconn.commit()
    again = await aenqueue(aconn, "t.unique", business_key="k", unique=True)
    skipped = await aenqueue_many(aconn, [TaskSpec("t.unique", business_key="k", unique=True)])
    await aconn.commit()
    assert again == first and skipped == []
    assert (await ledger.stats())["total"] == 1


async def test_anything_else_is_a_type_error_naming_what_is_accepted(
    settings: Settings,
    conn: psycopg.Connection[Any],
    aconn: psycopg.AsyncConnection[Any],
    ledger: PgLedger,
) -> None:
    accepted = r"a SQLAlchemy Session, scoped_session or Connection, or a psycopg.Connection"
    with pytest.raises(TypeError, match=rf"enqueue\(\) takes {accepted} .*; got builtins.str$"):
        enqueue("postgresql://db/shop", "t.k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"enqueue_many\(\) takes .*; got builtins.NoneType: "
                       r"with Django, pass django.db.connection inside"):  # fmt: skip
        enqueue_many(None, [TaskSpec("t.k")])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"got psycopg.AsyncConnection: use aenqueue\(\) for it"):
        enqueue(aconn, "t.k")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"aenqueue\(\) takes a SQLAlchemy AsyncSession, "
                       r"async_scoped_session or AsyncConnection, or a psycopg.AsyncConnection "
                       r".*; got psycopg.Connection: use enqueue\(\) for it"):  # fmt: skip
        await aenqueue(conn, "t.k")  # type: ignore[arg-type]
    engine = sync_engine(settings, "test-psycopg-producers", pool_size=1)
    aengine = async_engine(settings, "test-psycopg-producers", pool_size=1)
    try:
        wanted = r"got sqlalchemy.orm.session.Session: use enqueue_many\(\) for it"
        with Session(engine) as session, pytest.raises(TypeError, match=wanted):
            await aenqueue_many(session, [TaskSpec("t.k")])  # type: ignore[arg-type]
        async with aengine.connect() as aconnection:
            with pytest.raises(TypeError, match=r"got .*AsyncConnection: use aenqueue\(\) for it"):
                enqueue(aconnection, "t.k")  # type: ignore[arg-type]
    finally:
        engine.dispose()
        await aengine.dispose()
    # Nothing ran on either psycopg connection: no transaction was opened.
    assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert aconn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    assert (await ledger.stats())["total"] == 0


async def test_scoped_sessions_stand_for_their_current_session(
    settings: Settings, ledger: PgLedger
) -> None:
    # Flask-SQLAlchemy's db.session is a scoped_session: enqueue uses its current Session.
    engine = sync_engine(settings, "test-scoped", pool_size=1)
    aengine = async_engine(settings, "test-scoped", pool_size=1)
    try:
        scoped = scoped_session(sessionmaker(engine))
        with scoped.begin():
            kept = enqueue(scoped, "t.scoped", {"via": "scoped_session"})
        with scoped.begin():
            [dropped] = enqueue_many(scoped, [TaskSpec("t.scoped")])
            scoped.rollback()
        scoped.remove()
        ascoped = async_scoped_session(async_sessionmaker(aengine), scopefunc=asyncio.current_task)
        async with ascoped.begin():
            akept = await aenqueue(ascoped, "t.scoped", {"via": "async_scoped_session"})
        await ascoped.remove()
    finally:
        engine.dispose()
        await aengine.dispose()
    assert (await ledger.show(kept))["payload"] == {"via": "scoped_session"}
    assert (await ledger.show(akept))["payload"] == {"via": "async_scoped_session"}
    assert not await exists(ledger, dropped)
