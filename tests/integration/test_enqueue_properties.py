"""Property, on the real database: any payload and options, enqueued alone or in a
batch inside a caller's transaction, give a task id or an InvalidTaskError and
nothing else; a refusal writes no row and leaves the transaction usable; an
accepted payload comes back exactly (tuples as lists).

The one refusal the database makes, a ``parent_id`` that names no task
(UnknownParentError, from the child-insert trigger of migration 0010), fails the
statement, so the caller's transaction must be rolled back; it too writes
nothing."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import Connection, Engine, text

from ledgerq import InvalidTaskError, TaskSpec, UnknownParentError, enqueue, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import sync_engine
from tests.strategies import as_stored, kinds, options, payloads


@pytest.fixture(scope="module")
def engine(base_settings: Settings) -> Iterator[Engine]:
    # two: a refused parent is counted from a second connection (max_overflow is 0)
    engine = sync_engine(base_settings, "test-properties", pool_size=2)
    yield engine
    engine.dispose()


def rows(conn: Connection) -> int:
    return int(conn.execute(text("SELECT count(*) FROM ledgerq_tasks")).scalar_one())


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kind=kinds, payload=payloads, opts=options, batch=st.booleans())
def test_enqueue_gives_an_id_or_an_invalid_task_error_and_writes_nothing_on_refusal(
    engine: Engine, kind: Any, payload: Any, opts: dict[str, Any], batch: bool
) -> None:
    with engine.connect() as conn, conn.begin() as transaction:
        before = rows(conn)
        try:
            if batch:
                [task_id] = enqueue_many(conn, [TaskSpec(kind, payload, **opts)])
            else:
                task_id = enqueue(conn, kind, payload, **opts)
        except UnknownParentError:
            transaction.rollback()  # the statement failed: the transaction is aborted
            with engine.connect() as other:
                assert rows(other) == before
            return
        except InvalidTaskError:
            assert rows(conn) == before  # nothing written, and the transaction still works
            transaction.rollback()
            return
        stored = conn.execute(
            text("SELECT payload FROM ledgerq_tasks WHERE id = :id"), {"id": task_id}
        ).scalar_one()
        assert stored == as_stored({} if payload is None else payload)
        assert rows(conn) == before + 1
        transaction.rollback()
