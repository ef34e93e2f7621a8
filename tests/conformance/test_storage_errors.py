"""Errors never cross the seam as driver exceptions: a dropped connection is a
:class:`~ledgerq.core.errors.TransientStorageError`, a missing table a
:class:`~ledgerq.core.errors.SchemaMissingError`. The faults are injected with
PostgreSQL's own means (raw SQL on a connection of the test's: terminating a
backend, dropping a table), so this module runs on ``PgLedger``; another
driver's ledger brings its own fault injection and runs the same assertions."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import psycopg
import pytest
from psycopg import sql
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import make_url

from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.core.errors import SchemaMissingError, StorageError, TransientStorageError
from ledgerq.ledger.model import DueTask
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import upgrade

# pg_terminate_backend(pid, timeout_ms) returns once the backend has exited (true),
# so the fault is in place when the next statement runs: no sleep, whatever the load.


@pytest.fixture
def raw(base_settings: Settings) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
    """A plain connection, only for injecting faults."""
    with psycopg.connect(libpq_url(base_settings.database_url), autocommit=True) as conn:
        yield conn


# -- errors never cross the seam as driver exceptions --------------------------------------


async def test_a_terminated_backend_surfaces_as_a_transient_storage_error(
    base_settings: Settings, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    name = f"ledgerq-victim-{uuid.uuid4().hex[:8]}"
    async with open_ledger(base_settings, name, pool_size=1) as victim:
        assert await victim.whereabouts([1]) == {}  # the pooled connection is open
        [[killed]] = raw.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) "
            "FROM pg_stat_activity "
            "WHERE application_name = %s",
            (name,),
        ).fetchall()
        assert killed == 1  # and gone: the next query meets a closed connection

        with pytest.raises(TransientStorageError) as caught:
            await victim.whereabouts([1])

        assert not isinstance(caught.value, psycopg.Error)
        assert isinstance(caught.value.__cause__, sa_exc.DBAPIError)
        # worth retrying as it is: the pool has let the dead connection go
        assert await victim.whereabouts([1]) == {}


async def test_a_terminated_backend_under_a_publish_batch_is_transient_too(
    settings: Settings, raw: psycopg.Connection[tuple[Any, ...]]
) -> None:
    # ``settings``: an emptied ledger, so the batch is empty whichever test ran before
    name = f"ledgerq-victim-{uuid.uuid4().hex[:8]}"
    async with open_ledger(settings, name, pool_size=1) as victim:
        with pytest.raises(TransientStorageError):
            async with victim.publish_batch(10) as batch:
                assert batch.rows == []
                [[killed]] = raw.execute(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 10000)) "
                    "FROM pg_stat_activity "
                    "WHERE application_name = %s",
                    (name,),
                ).fetchall()
                assert killed == 1, killed
                await batch.mark_published([DueTask(1, "k", "default", 0, 0)])


@pytest.fixture
def throwaway(base_settings: Settings) -> Iterator[Settings]:
    """A database of its own, migrated, for damaging on purpose."""
    url = make_url(base_settings.database_url)
    name = f"{url.database}_throwaway"
    maintenance = libpq_url(url.set(database="postgres").render_as_string(False))

    def drop() -> None:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )

    drop()
    scratch = replace(base_settings, database_url=url.set(database=name).render_as_string(False))
    upgrade(scratch)  # creates the database, then the schema
    yield scratch
    drop()


async def test_a_missing_table_surfaces_as_a_storage_error_that_is_not_transient(
    throwaway: Settings,
) -> None:
    with psycopg.connect(libpq_url(throwaway.database_url), autocommit=True) as conn:
        # (CASCADE: the due rule's view reads history too, migration 0014.)
        conn.execute("DROP TABLE ledgerq_history CASCADE")

    # check=False: open it anyway (the start check would refuse this ledger).
    async with open_ledger(
        throwaway, "ledgerq-conformance-broken", pool_size=1, check=False
    ) as broken:
        with pytest.raises(StorageError) as caught:
            await broken.show(1)

    # A missing table is its own kind: services stop on it rather than retry.
    assert type(caught.value) is SchemaMissingError  # a StorageError, not transient
    assert not isinstance(caught.value, TransientStorageError)
    assert isinstance(caught.value.__cause__, sa_exc.DBAPIError)
    assert "ledgerq_history" in str(caught.value)
