"""The seam's transaction-scoped part (:class:`~ledgerq.ledger.protocol.TxLedger`,
sync and async): what it writes commits or rolls back with the caller's
transaction, and its writes are fenced like the ledger's own. A transaction lives
in one database: every single-database implementation."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from typing import Any

import aiomysql  # type: ignore[import-untyped]  # (no type hints)
import psycopg
import pymysql
import pytest
from sqlalchemy.engine import make_url

from ledgerq import Action, TaskFilter, TaskSpec, aenqueue, aenqueue_many, enqueue, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.operations import arelease_key, release_key
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.protocol import LedgerWithHarness
from tests.conformance.conftest import (
    MARIADB,
    ON_MARIADB,
    ONE_DATABASE,
    AsyncTransaction,
    Transaction,
)
from tests.conformance.support import LEASE_S, WORKER, claim_one

IMPLEMENTATIONS = ONE_DATABASE


@ON_MARIADB
async def test_enqueue_many_commits_with_the_callers_transaction_or_not_at_all(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction(commit=False) as tx:
        dropped = tx.enqueue_many([TaskSpec("conf.tx"), TaskSpec("conf.tx")])
    with transaction() as tx:
        kept = tx.enqueue_many([TaskSpec("conf.tx", {"n": 1})])
    async with atransaction() as atx:
        akept = await atx.enqueue_many([TaskSpec("conf.tx", {"n": 2})])

    assert len(dropped) == 2 and len(kept) == 1 and len(akept) == 1
    assert await ledger.whereabouts([*dropped, *kept, *akept]) == {
        kept[0]: "pending",
        akept[0]: "pending",
    }


@ON_MARIADB
async def test_succeed_is_fenced_and_commits_with_the_callers_work(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        rolled, done, adone = tx.enqueue_many([TaskSpec("conf.tx")] * 3)
    tasks = {i: await claim_one(ledger, i) for i in (rolled, done, adone)}

    with transaction(commit=False) as tx:
        assert tx.succeed([tasks[rolled].fence]) == {rolled}
    with transaction() as tx:
        assert tx.succeed([tasks[done].fence, (rolled, 0)], ['{"ok": 1}', None]) == {done}
    async with atransaction() as atx:
        assert await atx.succeed([tasks[adone].fence]) == {adone}
        assert await atx.succeed([tasks[done].fence]) == set()  # already finished

    assert await ledger.whereabouts([rolled, done, adone]) == {
        rolled: "running",
        done: "succeeded",
        adone: "succeeded",
    }
    assert (await ledger.show(done))["result"] == {"ok": 1}


@ON_MARIADB
async def test_lock_running_locks_the_fenced_running_rows_for_the_transaction(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        running, pending = tx.enqueue_many([TaskSpec("conf.tx")] * 2)
    task = await claim_one(ledger, running)

    with transaction() as tx:
        locked = tx.lock_running([task.fence, (pending, 0), (running, 0)])
        assert locked.ids == {running} and locked.holder is not None
        assert tx.succeed([task.fence]) == {running}  # the lock holder's finish wins
    async with atransaction() as atx:
        empty = await atx.lock_running([task.fence])
    assert empty.ids == set() and empty.holder is None


@ON_MARIADB
async def test_save_checkpoint_in_the_callers_transaction_is_fenced(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        [task_id] = tx.enqueue_many([TaskSpec("conf.tx")])
    task = await claim_one(ledger, task_id)

    with transaction() as tx:
        assert tx.save_checkpoint(task.fence, '{"step": 1}') is True
        assert tx.save_checkpoint((task_id, 0), '{"step": "stale"}') is False
    assert (await ledger.show(task_id))["checkpoint"] == {"step": 1}
    async with atransaction(commit=False) as atx:
        assert await atx.save_checkpoint(task.fence, '{"step": 2}') is True
    assert (await ledger.show(task_id))["checkpoint"] == {"step": 1}  # rolled back


@ON_MARIADB
async def test_act_list_and_release_key_run_in_the_callers_transaction(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    await ledger.register_ordering({"conf.block": "block"})
    with transaction() as tx:
        first, second, held = tx.enqueue_many(
            [
                TaskSpec("conf.tx"),
                TaskSpec("conf.tx"),
                TaskSpec("conf.block", ordering_key="acct-9", max_attempts=1),
            ]
        )
    [task] = await ledger.claim([(held, 0)], WORKER, LEASE_S)
    await ledger.finish([Outcome.failed(task.fence, "poison", final=True)])

    with transaction(commit=False) as tx:
        report = tx.act(Action.cancel(), TaskFilter(ids=(first,)), actor="ops")
        assert report.changed == 1
        assert [r["status"] for r in tx.list_tasks(TaskFilter(ids=(first,)))] == ["cancelled"]
    assert await ledger.whereabouts([first]) == {first: "pending"}  # rolled back
    async with atransaction() as atx:
        await atx.act(Action.cancel(), TaskFilter(ids=(second,)), actor="ops", reason="tx")
        assert {r["id"] for r in await atx.list_tasks(TaskFilter(kind="conf.tx"))} == {
            first,
            second,
        }
        released = await atx.release_key("acct-9", actor="ops")
    assert released.released == [held]
    assert await ledger.whereabouts([second]) == {second: "cancelled"}
    with transaction() as tx:
        assert tx.release_key("acct-9", actor="ops", dry_run=True).released == []
        with pytest.raises(TaskNotFoundError):
            tx.release_key("no-such-key", actor="ops")


async def _held_keys(ledger: LedgerWithHarness, transaction: Transaction, *keys: str) -> list[int]:
    """One dead task of a blocking kind per key in ``keys``, each holding its key
    (a pending task of the key behind it); their ids, in ``keys``' order."""
    await ledger.register_ordering({"conf.block": "block"})
    specs = [TaskSpec("conf.block", ordering_key=k, max_attempts=1) for k in keys]
    with transaction() as tx:
        ids = tx.enqueue_many([*specs, *(TaskSpec("conf.after", ordering_key=k) for k in keys)])
    for held in ids[: len(keys)]:
        task = await claim_one(ledger, held)
        await ledger.finish([Outcome.failed(task.fence, "poison", final=True)])
    return ids[: len(keys)]


async def _holders(ledger: LedgerWithHarness, key: str) -> list[int]:
    """The dead tasks that hold ``key`` now (a dry run: it writes nothing)."""
    return (await ledger.release_key(key, actor="conformance", dry_run=True)).released


@ON_MARIADB
async def test_release_key_in_the_callers_transaction_commits_or_rolls_back_with_it(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    sync_held, async_held = await _held_keys(ledger, transaction, "acct-s", "acct-a")

    with transaction(commit=False) as tx:
        undone = tx.release_key("acct-s", actor="ops")
        assert undone.released == [sync_held] and undone.audit_id is not None
    async with atransaction(commit=False) as atx:
        aundone = await atx.release_key("acct-a", actor="ops")
        assert aundone.released == [async_held] and aundone.audit_id is not None
    assert await _holders(ledger, "acct-s") == [sync_held]  # rolled back: still held
    assert await _holders(ledger, "acct-a") == [async_held]
    assert await ledger.audit() == []  # and the audit records with them

    with transaction() as tx:
        done = tx.release_key("acct-s", actor="ops", reason="sync")
    async with atransaction() as atx:
        adone = await atx.release_key("acct-a", actor="ops", reason="async")
    assert (done.released, done.moved_on, done.waiting, done.live) == ([sync_held], 0, 1, 1)
    assert (adone.released, adone.moved_on, adone.waiting, adone.live) == ([async_held], 0, 1, 1)
    assert await _holders(ledger, "acct-s") == [] and await _holders(ledger, "acct-a") == []
    records = {r["id"]: r for r in await ledger.audit()}
    assert set(records) == {done.audit_id, adone.audit_id}
    for report, reason in ((done, "sync"), (adone, "async")):
        record = records[report.audit_id]
        assert (record["action"], record["actor"], record["reason"]) == (
            "release-key",
            "ops",
            reason,
        )
        assert (record["matched"], record["changed"], record["skipped"]) == (1, 1, 0)
        assert record["selection"] == {"ordering_key": report.key}
    task_audit = (await ledger.find(sync_held))["audit"]
    assert [(a["action"], a["outcome"]) for a in task_audit] == [("release-key", "changed")]

    with transaction() as tx:  # nothing holds it now: not an error, nothing written
        again = tx.release_key("acct-s", actor="ops")
    assert (again.held, again.audit_id) == (False, None)
    async with atransaction() as atx:
        with pytest.raises(TaskNotFoundError):
            await atx.release_key("no-such-key", actor="ops")


@ON_MARIADB
async def test_enqueue_returns_the_id_holding_a_unique_key_and_inserts_nothing(
    ledger: LedgerWithHarness, transaction: Transaction, atransaction: AsyncTransaction
) -> None:
    with transaction() as tx:
        first = tx.enqueue(TaskSpec("conf.tx", business_key="k-1", unique=True))
        again = tx.enqueue(TaskSpec("conf.tx", business_key="k-1", unique=True))
    async with atransaction() as atx:
        later = await atx.enqueue(TaskSpec("conf.tx", business_key="k-1", unique=True))
        other = await atx.enqueue(TaskSpec("conf.tx", business_key="k-2", unique=True))

    assert first == again == later and other != first
    assert (await ledger.stats())["total"] == 2


# -- raw DB-API connections (the Django case) and enqueue_many's ids --------------------


@pytest.fixture
def raw_connection(implementation: str, databases: list[Settings]) -> Iterator[Any]:
    """A raw DB-API connection on the implementation's database, not in autocommit (an
    implicit transaction): psycopg 3 on PostgreSQL, PyMySQL on MariaDB."""
    url = databases[0].database_url
    if implementation == MARIADB:
        parts = make_url(url)
        conn: Any = pymysql.connect(
            host=parts.host or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            database=parts.database,
        )
    else:
        conn = psycopg.connect(libpq_url(url))
    try:
        yield conn
    finally:
        conn.close()


@pytest.fixture
async def araw_connection(implementation: str, databases: list[Settings]) -> AsyncIterator[Any]:
    """:func:`raw_connection`, async: psycopg 3's on PostgreSQL, aiomysql's on MariaDB."""
    url = databases[0].database_url
    if implementation == MARIADB:
        parts = make_url(url)
        conn: Any = await aiomysql.connect(
            host=parts.host or "127.0.0.1",
            port=parts.port or 3306,
            user=parts.username or "root",
            password=parts.password or "",
            db=parts.database,
        )
    else:
        conn = await psycopg.AsyncConnection.connect(libpq_url(url))
    try:
        yield conn
    finally:
        if implementation == MARIADB:
            conn.close()
        else:
            await conn.close()


@ON_MARIADB
async def test_enqueue_on_a_raw_dbapi_connection_commits_with_it_or_not_at_all(
    ledger: LedgerWithHarness, raw_connection: Any, araw_connection: Any
) -> None:
    dropped = enqueue_many(raw_connection, [TaskSpec("conf.raw"), TaskSpec("conf.raw")])
    dropped.append(enqueue(raw_connection, "conf.raw", {"n": 0}))
    raw_connection.rollback()
    kept = enqueue_many(raw_connection, [TaskSpec("conf.raw", {"n": 1})])
    kept.append(enqueue(raw_connection, "conf.raw", {"n": 2}, business_key="b", unique=True))
    again = enqueue(raw_connection, "conf.raw", {"n": 3}, business_key="b", unique=True)
    raw_connection.commit()
    akept = await aenqueue_many(araw_connection, [TaskSpec("conf.raw", {"n": 4})])
    await araw_connection.commit()
    adropped = await aenqueue(araw_connection, "conf.raw", {"n": 5})
    await araw_connection.rollback()

    assert again == kept[1]  # the live duplicate's id, nothing inserted
    assert len({*dropped, *kept, *akept, adropped}) == 7
    assert await ledger.whereabouts([*dropped, *kept, *akept, adropped]) == {
        kept[0]: "pending",
        kept[1]: "pending",
        akept[0]: "pending",
    }
    assert [(await ledger.show(i))["payload"] for i in (*kept, *akept)] == [
        {"n": 1},
        {"n": 2},
        {"n": 4},
    ]


@ON_MARIADB
async def test_release_key_on_a_raw_dbapi_connection_commits_with_it_or_not_at_all(
    ledger: LedgerWithHarness,
    transaction: Transaction,
    raw_connection: Any,
    araw_connection: Any,
) -> None:
    sync_held, async_held = await _held_keys(ledger, transaction, "acct-s", "acct-a")

    assert release_key(raw_connection, "acct-s", actor="ops").released == [sync_held]
    raw_connection.rollback()
    assert (await arelease_key(araw_connection, "acct-a", actor="ops")).released == [async_held]
    await araw_connection.rollback()
    assert await _holders(ledger, "acct-s") == [sync_held]
    assert await _holders(ledger, "acct-a") == [async_held]
    assert await ledger.audit() == []

    done = release_key(raw_connection, "acct-s", actor="ops")
    raw_connection.commit()
    adone = await arelease_key(araw_connection, "acct-a", actor="ops")
    await araw_connection.commit()
    assert done.released == [sync_held] and adone.released == [async_held]
    assert await _holders(ledger, "acct-s") == [] and await _holders(ledger, "acct-a") == []
    assert {r["id"] for r in await ledger.audit()} == {done.audit_id, adone.audit_id}


@ON_MARIADB
async def test_a_raw_connection_of_the_wrong_kind_is_refused_before_any_statement(
    ledger: LedgerWithHarness, raw_connection: Any, araw_connection: Any
) -> None:
    with pytest.raises(TypeError, match=r"use aenqueue\(\) for it"):
        enqueue(araw_connection, "conf.raw")
    with pytest.raises(TypeError, match=r"use enqueue\(\) for it"):
        await aenqueue(raw_connection, "conf.raw")
    assert (await ledger.stats())["total"] == 0


@ON_MARIADB
async def test_enqueue_many_answers_each_rows_id_in_input_order(
    ledger: LedgerWithHarness, transaction: Transaction, raw_connection: Any
) -> None:
    specs = [TaskSpec("conf.many", {"i": i}, priority=i % 10) for i in range(250)]
    # Text that JSON escapes, and every optional field, survive the batch as they are.
    odd = {"i": 'é\n"\\ 😀 \u2028 %s %(x)s', "nested": [1.5, None, True, {"k": "v"}]}
    specs[3] = TaskSpec(
        "conf.many",
        odd,
        priority=3,
        tags=["t-1", "ü"],
        retry=[1, 2],
        max_attempts=4,
        timeout=2.5,
        business_key="bk-3",
        delay=3600,
    )
    with transaction() as tx:
        ids = tx.enqueue_many(specs)
    raw_ids = enqueue_many(raw_connection, specs[:7])
    raw_connection.commit()
    # Duplicates of a unique key (one in the batch, one already live) are left out.
    with transaction() as tx:
        [held] = tx.enqueue_many(
            [TaskSpec("conf.many", {"i": "held"}, business_key="k", unique=True)]
        )
        mixed = tx.enqueue_many(
            [
                TaskSpec("conf.many", {"i": "a"}),
                TaskSpec("conf.many", {"i": "dup"}, business_key="k", unique=True),
                TaskSpec("conf.many", {"i": "b"}, business_key="k2", unique=True),
                TaskSpec("conf.many", {"i": "dup2"}, business_key="k2", unique=True),
                TaskSpec("conf.many", {"i": "c"}),
            ]
        )

    assert len(set(ids)) == 250 and len(set(raw_ids)) == 7 and held not in mixed
    for task_id, spec in zip([*ids, *raw_ids], [*specs, *specs[:7]], strict=True):
        shown = await ledger.show(task_id)
        assert (shown["payload"], shown["priority"]) == (spec.payload, spec.priority)
    assert [(await ledger.show(i))["payload"]["i"] for i in mixed] == ["a", "b", "c"]
    shown = await ledger.show(ids[3])
    assert shown["payload"] == odd and shown["business_key"] == "bk-3", shown
    assert (shown["tags"], shown["max_attempts"], shown["timeout_s"]) == (["t-1", "ü"], 4, 2.5)
    delay = datetime.fromisoformat(shown["run_at"]) - datetime.fromisoformat(shown["created_at"])
    assert 3590 < delay.total_seconds() < 3610, shown


@ON_MARIADB
async def test_enqueue_many_over_several_statements_takes_shards_from_the_new_ids(
    ledger: LedgerWithHarness, transaction: Transaction, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERQ_SHARDS", "4")
    # More tasks than one statement takes (MariaDB: 1,000 a batch), every 7th on shard 2.
    specs = [TaskSpec("conf.many", {"i": i}, shard=2 if i % 7 == 0 else None) for i in range(2100)]
    with transaction() as tx:
        ids = tx.enqueue_many(specs)

    assert len(set(ids)) == len(specs)
    for task_id, spec in zip(ids, specs, strict=True):
        shown = await ledger.show(task_id)
        assert shown["payload"] == spec.payload
        assert shown["shard"] == (2 if spec.shard is not None else task_id % 4), shown
