"""The conformance suite's implementations: every test runs once per storage
implementation that serves its protocol.

``ledger`` is the implementation under test. A module's ``IMPLEMENTATIONS``
names the ones it runs on: :data:`EVERY` (the default: ``PgLedger`` on one
database, and :class:`~ledgerq.ledger.split.ledger.ShardedLedger` over two shard
databases) for what the processes that meet every shard ask (the worker's,
routing, operations, inspection, scheduling, the testing protocol), and
:data:`ONE_DATABASE` for the protocols that work on one database at a time
(the relay's, the reconciler's, retention, the rollup, the overview). A new
implementation is one more name here and one more branch in :func:`ledger`.

``mariadb`` is the MySQL / MariaDB ledger (:class:`~ledgerq.ledger.mysql.MyLedger`,
issue 29), on the server scripts/lib.sh starts: it implements part of the seam so
far, so a module runs on it when its ``IMPLEMENTATIONS`` names it, and a single
test when it carries ``@pytest.mark.mariadb`` (see :data:`ON_MARIADB`).

``enqueue`` creates tasks as a producer does (``enqueue_many`` in a committed
transaction); with shards, each task on the next shard in turn, so batches
cross shards. Time passes only through the testing protocol's ``backdate``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import (
    AbstractAsyncContextManager,
    AbstractContextManager,
    asynccontextmanager,
    contextmanager,
)
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue_many
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.binds import atx_for, tx_for
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.protocol import AsyncTxLedger, TxLedger
from ledgerq.ledger.split.ledger import ShardedLedger
from tests.conformance.support import SUBSCRIBER, Enqueue, window
from tests.shard_dbs import create_shards

#: Every implementation, and those of the single-database protocols.
EVERY = ("pg", "sharded")
ONE_DATABASE = ("pg",)
SHARDS = 2
#: The MySQL / MariaDB ledger; a test marked with ON_MARIADB runs on it as well as on
#: its module's implementations (a module whose every test does names it instead).
MARIADB = "mariadb"
ON_MARIADB = pytest.mark.mariadb

Transaction = Callable[..., AbstractContextManager[TxLedger]]
AsyncTransaction = Callable[..., AbstractAsyncContextManager[AsyncTxLedger]]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "implementation" in metafunc.fixturenames:
        names = tuple(getattr(metafunc.module, "IMPLEMENTATIONS", EVERY))
        if metafunc.definition.get_closest_marker("mariadb") and MARIADB not in names:
            names += (MARIADB,)
        metafunc.parametrize("implementation", names)


@pytest.fixture(scope="session")
def shard_settings(base_settings: Settings) -> Settings:
    """Two shard databases (``<test db>_c1``, ``_c2``), created once a session."""
    return create_shards(base_settings, SHARDS, tag="c")


@pytest.fixture
def databases(implementation: str, request: pytest.FixtureRequest) -> list[Settings]:
    """The databases under ``implementation``, one per shard."""
    if implementation == MARIADB:
        return [request.getfixturevalue("mariadb_settings")]
    if implementation == "sharded":
        sharded: Settings = request.getfixturevalue("shard_settings")
        return sharded.ledger_shards()
    base: Settings = request.getfixturevalue("base_settings")
    return [base]


def _opened(
    implementation: str, databases: list[Settings], name: str, pool_size: int
) -> PgLedger | ShardedLedger | MyLedger:
    """``implementation`` on ``databases``, through the composition root's engines."""
    if implementation == MARIADB:
        return MyLedger(async_engine(databases[0], name, pool_size=pool_size))
    shards = [PgLedger(async_engine(db, name, pool_size=pool_size)) for db in databases]
    return shards[0] if implementation == "pg" else ShardedLedger(shards)


@pytest.fixture
async def ledger(implementation: str, databases: list[Settings]) -> AsyncIterator[Any]:
    """The implementation under test, emptied, with a live whole-queue subscriber on
    "default" and "other" whose window is larger than any test's rows (the relay's
    and the reconciler's batches pick only what a live window has room for)."""
    opened = _opened(implementation, databases, "ledgerq-conformance", pool_size=3)
    try:
        await opened.truncate()
        await window(opened, 10_000)
        yield opened
    finally:
        await opened.unsubscribe(SUBSCRIBER)
        await opened.dispose()


@pytest.fixture
def enqueue(databases: list[Settings]) -> Iterator[Enqueue]:
    """Create tasks as a producer does: ``enqueue_many`` in a committed transaction
    (one per shard the tasks go to; the i-th task to shard i mod the shard count)."""
    engines: list[Engine] = [
        sync_engine(db, "ledgerq-conformance-producer", pool_size=1) for db in databases
    ]

    def create(*specs: TaskSpec | str, **options: Any) -> list[int]:
        tasks = [s if isinstance(s, TaskSpec) else TaskSpec(s, **options) for s in specs]
        ids: list[int] = [0] * len(tasks)
        for k, engine in enumerate(engines):
            mine = list(range(k, len(tasks), len(engines)))
            if not mine:
                continue
            with Session(engine) as session, session.begin():
                for position, task_id in zip(
                    mine, enqueue_many(session, [tasks[i] for i in mine]), strict=True
                ):
                    ids[position] = task_id
        return ids

    yield create
    for engine in engines:
        engine.dispose()


@pytest.fixture
async def rival(implementation: str, databases: list[Settings]) -> AsyncIterator[Any]:
    """A second instance of the implementation on the same databases (another
    process's), for the tests of what two holders may not share."""
    opened = _opened(implementation, databases, "ledgerq-conformance-rival", pool_size=1)
    try:
        yield opened
    finally:
        await opened.dispose()


@pytest.fixture
def transaction(databases: list[Settings]) -> Iterator[Transaction]:
    """A caller's transaction on the implementation's (first) database, and the
    seam's transaction-scoped part on it: ``with transaction() as tx`` commits at
    the end of the block, ``transaction(commit=False)`` rolls back."""
    engine = sync_engine(databases[0], "ledgerq-conformance-tx", pool_size=1)

    @contextmanager
    def begin(commit: bool = True) -> Iterator[TxLedger]:
        with Session(engine) as session:
            session.begin()
            try:
                yield tx_for(session, "conformance")
                if commit:
                    session.commit()
            finally:
                if session.in_transaction():
                    session.rollback()

    yield begin
    engine.dispose()


@pytest.fixture
async def atransaction(databases: list[Settings]) -> AsyncIterator[AsyncTransaction]:
    """:func:`transaction` on an async Session."""
    engine = async_engine(databases[0], "ledgerq-conformance-atx", pool_size=1)

    @asynccontextmanager
    async def begin(commit: bool = True) -> AsyncIterator[AsyncTxLedger]:
        async with AsyncSession(engine) as session:
            await session.begin()
            try:
                yield atx_for(session, "conformance")
                if commit:
                    await session.commit()
            finally:
                if session.in_transaction():
                    await session.rollback()

    yield begin
    await engine.dispose()
