"""The worker's batched window at the seam (consumers/window.py): ``lock_running``
holds the fenced running rows for the caller's transaction, the handlers'
savepoints undo one handler's writes alone, and ``end_window`` ends the locking
transaction from another connection, and only it. On every single-database
implementation, MySQL / MariaDB included (ledger/mysql/window.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta

import pytest
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq import TaskSpec
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.binds import atx_for, tx_for
from ledgerq.ledger.protocol import LedgerWithHarness
from ledgerq.ledger.within import (
    AsyncHandlerMarks,
    HandlerMarks,
    alock_within,
    end_window,
    lock_within,
)
from tests.conformance.conftest import ON_MARIADB, ONE_DATABASE, Transaction
from tests.conformance.support import claim_one

IMPLEMENTATIONS = ONE_DATABASE
pytestmark = ON_MARIADB


@pytest.fixture
def engine(databases: list[Settings]) -> Iterator[Engine]:
    made = sync_engine(databases[0], "ledgerq-conformance-window", pool_size=2)
    yield made
    made.dispose()


@pytest.fixture
async def aengine(databases: list[Settings]) -> AsyncIterator[AsyncEngine]:
    made = async_engine(databases[0], "ledgerq-conformance-awindow", pool_size=1)
    yield made
    await made.dispose()


async def test_a_locked_row_is_skipped_by_another_window_until_the_lock_ends(
    ledger: LedgerWithHarness, transaction: Transaction, engine: Engine
) -> None:
    with transaction() as tx:
        [task_id] = tx.enqueue_many([TaskSpec("conf.window")])
    task = await claim_one(ledger, task_id)

    with engine.connect() as first, engine.connect() as second:
        first.begin()
        assert lock_within(first, [task.fence]).ids == {task_id}
        second.begin()
        assert lock_within(second, [task.fence]).ids == set()  # SKIP LOCKED
        second.rollback()
        first.rollback()
        second.begin()
        assert lock_within(second, [task.fence]).ids == {task_id}
        second.rollback()


async def test_end_window_ends_the_transaction_that_locked_and_no_other(
    ledger: LedgerWithHarness, transaction: Transaction, engine: Engine
) -> None:
    with transaction() as tx:
        [task_id] = tx.enqueue_many([TaskSpec("conf.window")])
    task = await claim_one(ledger, task_id)

    with engine.connect() as window:
        window.begin()
        locked = lock_within(window, [task.fence])
        assert locked.holder is not None
        pid, began = locked.holder
        # another transaction's start, or another connection: left alone
        assert end_window(engine, (pid, began - timedelta(seconds=5))) is False
        assert lock_within(window, [task.fence]).ids == {task_id}  # still its own
        assert end_window(engine, locked.holder) is True
        with pytest.raises(DBAPIError):  # its connection is gone
            lock_within(window, [task.fence])
        window.invalidate()
    assert end_window(engine, locked.holder) is False  # nothing left to end

    with engine.connect() as other:  # the window's locks went with it
        other.begin()
        assert lock_within(other, [task.fence]).ids == {task_id}
        other.rollback()
    assert await ledger.whereabouts([task_id]) == {task_id: "running"}


async def test_handler_marks_undo_one_handlers_writes_and_keep_the_others(
    ledger: LedgerWithHarness, transaction: Transaction, engine: Engine, aengine: AsyncEngine
) -> None:
    with transaction() as tx:
        [task_id] = tx.enqueue_many([TaskSpec("conf.window")])
    task = await claim_one(ledger, task_id)

    with engine.connect() as conn:
        conn.begin()
        assert lock_within(conn, [task.fence]).ids == {task_id}
        marks = HandlerMarks(conn)
        tx = tx_for(conn, "conformance")
        marks.mark()
        [undone] = tx.enqueue_many([TaskSpec("conf.window.undone")])
        marks.undo()
        marks.mark()
        [kept] = tx.enqueue_many([TaskSpec("conf.window.kept")])
        marks.close()
        assert tx.succeed([task.fence]) == {task_id}  # in the transaction that locked
        assert marks.intact
        conn.commit()

    async with aengine.connect() as aconn:
        await aconn.begin()
        amarks = await AsyncHandlerMarks.open(aconn)
        atx = atx_for(aconn, "conformance")
        await amarks.mark()
        [aundone] = await atx.enqueue_many([TaskSpec("conf.window.undone")])
        await amarks.undo()
        await amarks.mark()
        [akept] = await atx.enqueue_many([TaskSpec("conf.window.kept")])
        await amarks.close()
        assert (await alock_within(aconn, [task.fence])).ids == set()  # it ended above
        await aconn.commit()

    assert await ledger.whereabouts([task_id, undone, kept, aundone, akept]) == {
        task_id: "succeeded",
        kept: "pending",
        akept: "pending",
    }
