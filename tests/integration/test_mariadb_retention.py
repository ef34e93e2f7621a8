"""Retention on MariaDB (issue 29): history partitioned by (status, finish day)
where the server allows it (migration m0004), the reconciler's upkeep pass and
``ledgerq purge`` run on a MariaDB URL, removing only what is past its retention.

Finished tasks of a given age are made by :func:`bury`, which inserts history rows
with a chosen ``finished_at`` (raw SQL: the test simulates time passing; nothing
in ledgerq writes a past finish time). Everything else goes through the seam or
the command line.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, time, timedelta
from typing import Any

import pymysql
import pytest
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import ledgerq
from ledgerq.compose.storage import async_engine, sync_engine
from ledgerq.core.config import Settings
from ledgerq.core.errors import TransientStorageError
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.mysql.migrations.versions import m0004_retention
from tests.support import ledgerq as run_ledgerq

#: History ids of the buried rows (far from the hot table's AUTO_INCREMENT ones).
_IDS = itertools.count(10_000_000)
BURY = """
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at, finished_at)
VALUES (%s, 'old.task', 'default', '{}', 0, 0, %s, %s, 1, 5, 1, 1, %s, %s)
"""


def _query(settings: Settings, statement: str, rows: list[tuple[Any, ...]] | None = None) -> Any:
    url = make_url(settings.database_url)
    with (
        pymysql.connect(
            host=url.host or "127.0.0.1",
            port=url.port or 3306,
            user=url.username or "root",
            password=url.password or "",
            database=url.database,
            autocommit=True,
        ) as conn,
        conn.cursor() as cursor,
    ):
        if rows is not None:
            cursor.executemany(statement, rows)
            return None
        cursor.execute(statement)
        return list(cursor.fetchall())


def bury(settings: Settings, status: str, finished_at: datetime, n: int) -> None:
    """``n`` tasks that ended ``status`` at ``finished_at``."""
    at = utc(finished_at)
    _query(settings, BURY, [(next(_IDS), at, status, at, at) for _ in range(n)])


def where(settings: Settings) -> dict[str, int]:
    """How many rows each partition of history holds (the empty ones left out)."""
    rows = _query(
        settings,
        "SELECT p, COUNT(*) FROM (SELECT CASE "
        + " ".join(
            f"WHEN id IN (SELECT id FROM ledgerq_history PARTITION ({name})) THEN '{name}'"
            for name in _partition_names(settings)
        )
        + " END AS p FROM ledgerq_history) h GROUP BY p",
    )
    return {str(name): int(n) for name, n in rows}


def _partition_names(settings: Settings) -> list[str]:
    rows = _query(
        settings,
        "SELECT partition_name FROM information_schema.partitions WHERE table_schema = "
        "DATABASE() AND table_name = 'ledgerq_history' ORDER BY partition_ordinal_position",
    )
    return [str(r[0]) for r in rows]


@pytest.fixture
async def ledger(mariadb_settings: Settings) -> AsyncIterator[MyLedger]:
    """The MariaDB ledger emptied, with no day partition left by an earlier test and
    each status's p_<status>_old in place (a test may turn it into a day's)."""
    opened = MyLedger(async_engine(mariadb_settings, "ledgerq-test-retention", pool_size=1))
    try:
        await opened.truncate()
        for day in await opened.history_days():
            await opened.drop_history_day(day.status, day.day)
        today = (await opened.database_now()).astimezone(UTC).date()
        names = _partition_names(mariadb_settings)
        for status in ("cancelled", "dead", "succeeded"):
            if f"p_{status}_old" not in names:
                _query(
                    mariadb_settings,
                    f"ALTER TABLE ledgerq_history REORGANIZE PARTITION p_{status}_new INTO ("
                    f"PARTITION p_{status}_old VALUES LESS THAN ('{status}', '{today}'), "
                    f"PARTITION p_{status}_new VALUES LESS THAN ('{status}', MAXVALUE))",
                )
        yield opened
    finally:
        await opened.dispose()


@pytest.fixture
def settings(mariadb_settings: Settings) -> Settings:
    """The MariaDB ledger's settings, with the suite's broker: the reconciler connects
    to it (it publishes stalled and overdue tasks), as on PostgreSQL."""
    return mariadb_settings


async def noon(ledger: MyLedger, days_ago: int) -> datetime:
    today = (await ledger.database_now()).astimezone(UTC).date()
    return datetime.combine(today - timedelta(days=days_ago), time(12), tzinfo=UTC)


def enqueue_live(settings: Settings) -> int:
    engine = sync_engine(settings, "ledgerq-test-producer", pool_size=1)
    try:
        with Session(engine) as session, session.begin():
            return ledgerq.enqueue(session, "t.live", {})
    finally:
        engine.dispose()


def test_history_is_partitioned_by_status_then_day(mariadb_settings: Settings) -> None:
    names = _partition_names(mariadb_settings)
    for status in ("cancelled", "dead", "succeeded"):
        assert {f"p_{status}_old", f"p_{status}_new"} <= set(names)
    [[key]] = _query(
        mariadb_settings,
        "SELECT GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics "
        "WHERE table_schema = DATABASE() AND table_name = 'ledgerq_history' "
        "AND index_name = 'PRIMARY'",
    )
    assert key == "id,status,finished_at"


async def test_a_reconciler_pass_on_mariadb_creates_days_drops_expired_ones_and_deletes_the_rest(
    ledger: MyLedger, settings: Settings
) -> None:
    today = (await ledger.database_now()).astimezone(UTC).date()
    ten_days_ago = await noon(ledger, 10)
    for status in ("succeeded", "dead"):
        assert await ledger.add_history_day(status, ten_days_ago.date()) == 0
        bury(settings, status, ten_days_ago, 40)
        bury(settings, status, await noon(ledger, 3), 5)  # after that day: p_<status>_old
    bury(settings, "succeeded", await noon(ledger, 8), 7)  # expired, in p_succeeded_old
    live = enqueue_live(settings)

    result = run_ledgerq(settings, "reconcile", "--json")  # the default retention: 7 days
    assert result.returncode == 0, result.stderr
    counts = json.loads(result.stdout)["retention"]
    assert (counts["created"], counts["dropped"], counts["dropped_rows"]) == (12, 1, 40)
    assert counts["deleted_rows"] == 7 and counts["by_status"] == {"succeeded": 47}

    days = {(d.status, d.day) for d in await ledger.history_days()}
    for status in ("succeeded", "dead", "cancelled"):
        assert {(status, today + timedelta(days=n)) for n in range(4)} <= days
    assert ("succeeded", ten_days_ago.date()) not in days
    assert ("dead", ten_days_ago.date()) in days  # dead tasks are kept 90 days
    assert where(settings) == {
        "p_succeeded_old": 5,
        "p_dead_old": 5,
        f"p_dead_{ten_days_ago:%Y%m%d}": 40,
    }
    assert await ledger.whereabouts([live]) == {live: "pending"}

    again = run_ledgerq(settings, "reconcile", "--json")
    assert again.returncode == 0, again.stderr
    counts = json.loads(again.stdout)["retention"]
    assert (counts["created"], counts["dropped"], counts["removed"]) == (0, 0, 0)


async def test_purge_on_mariadb_removes_only_what_it_should_and_a_dry_run_nothing(
    ledger: MyLedger, settings: Settings
) -> None:
    for days_ago in (20, 10, 2):
        when = await noon(ledger, days_ago)
        for status in ("succeeded", "dead", "cancelled"):
            await ledger.add_history_day(status, when.date())
            bury(settings, status, when, 3)
    # Between the days of 10 and 2 days ago: held by the later day's partition (a
    # range partition takes everything since the one before it), not yet expired
    # as a whole, so these two are deleted in a batch.
    bury(settings, "dead", await noon(ledger, 6), 2)
    live = enqueue_live(settings)
    before = where(settings)

    dry = run_ledgerq(
        settings, "purge", "--older-than", "5d", "--status", "dead", "--dry-run", "--json"
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["matched"] == {"dead": 8}
    assert where(settings) == before

    done = run_ledgerq(
        settings, "purge", "--older-than", "5d", "--status", "dead", "--status", "cancelled",
        "--yes", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["matched"] == {"dead": 8, "cancelled": 6}
    assert (counts["removed"], counts["dropped"], counts["deleted_rows"]) == (14, 4, 2)
    assert counts["by_status"] == {"dead": 8, "cancelled": 6}
    remaining = _query(settings, "SELECT status, COUNT(*) FROM ledgerq_history GROUP BY status")
    assert dict(remaining) == {"succeeded": 9, "dead": 3, "cancelled": 3}
    assert await ledger.whereabouts([live]) == {live: "pending"}

    # Without --older-than: each status's retention from the settings.
    by_settings = run_ledgerq(
        settings, "purge", "--yes", "--json", LEDGERQ_RETENTION_SUCCEEDED_DAYS="15",
        LEDGERQ_RETENTION_DEAD_DAYS="0", LEDGERQ_RETENTION_CANCELLED_DAYS="0",
    )  # fmt: skip
    assert by_settings.returncode == 0, by_settings.stderr
    assert json.loads(by_settings.stdout)["matched"] == {"succeeded": 3}
    text = run_ledgerq(settings, "purge", "--older-than", "1d", "--status", "succeeded", "--yes")
    assert text.returncode == 0, text.stderr
    assert "removed 6 finished tasks (succeeded 6): 2 day partitions dropped" in text.stdout


async def test_days_before_the_migration_are_split_off_the_old_partition(
    ledger: MyLedger, settings: Settings
) -> None:
    # The test database was migrated today: p_<status>_old ends at today's start.
    days = [await noon(ledger, n) for n in (3, 2, 1)]
    for status in ("dead", "cancelled"):
        for when in days:
            bury(settings, status, when, 2)
    bury(settings, "dead", await noon(ledger, 9), 1)
    for when in days:  # oldest first: the last one is all that is left of p_dead_old
        assert await ledger.add_history_day("dead", when.date()) in (2, 3)
    assert await ledger.add_history_day("cancelled", days[-1].date()) == 2
    assert where(settings) == {
        f"p_dead_{days[0]:%Y%m%d}": 3,  # with the older one, below it
        f"p_dead_{days[1]:%Y%m%d}": 2,
        f"p_dead_{days[2]:%Y%m%d}": 2,
        "p_cancelled_old": 4,
        f"p_cancelled_{days[2]:%Y%m%d}": 2,
    }
    assert "p_dead_old" not in _partition_names(settings)
    for when in days:
        assert await ledger.add_history_day("dead", when.date()) is None


async def test_on_history_without_partitioning_retention_deletes_in_batches(
    ledger: MyLedger, settings: Settings
) -> None:
    # A server without partitioning: the migration left history one table.
    today = (await ledger.database_now()).astimezone(UTC).date()
    _query(settings, "ALTER TABLE ledgerq_history REMOVE PARTITIONING")
    try:
        assert await ledger.history_days() == []
        assert await ledger.add_history_day("dead", today) is None
        assert await ledger.drop_history_day("dead", today) is None
        bury(settings, "dead", await noon(ledger, 10), 3)
        bury(settings, "succeeded", await noon(ledger, 10), 4)
        bury(settings, "succeeded", await noon(ledger, 2), 2)

        done = run_ledgerq(settings, "purge", "--older-than", "5d", "--yes", "--json")
        assert done.returncode == 0, done.stderr
        counts = json.loads(done.stdout)
        assert (counts["removed"], counts["dropped"], counts["deleted_rows"]) == (7, 0, 7)
        remaining = _query(settings, "SELECT status, COUNT(*) FROM ledgerq_history GROUP BY status")
        assert dict(remaining) == {"succeeded": 2}
    finally:
        _query(
            settings,
            "ALTER TABLE ledgerq_history PARTITION BY RANGE COLUMNS (status, finished_at) ("
            + m0004_retention._partitions(today)
            + ")",
        )


async def test_two_passes_at_once_create_a_day_once(
    ledger: MyLedger, mariadb_settings: Settings
) -> None:
    rival = MyLedger(async_engine(mariadb_settings, "ledgerq-test-rival", pool_size=1))
    day = (await ledger.database_now()).astimezone(UTC).date() + timedelta(days=20)
    try:
        for status in ("succeeded", "dead"):
            created = await asyncio.gather(
                ledger.add_history_day(status, day), rival.add_history_day(status, day)
            )
            assert sorted(created, key=lambda n: n is None) == [0, None]
            dropped = await asyncio.gather(
                ledger.drop_history_day(status, day), rival.drop_history_day(status, day)
            )
            assert sorted(dropped, key=lambda n: n is None) == [0, None]
    finally:
        await rival.dispose()


async def test_a_drop_gives_up_after_2_s_behind_a_transaction_reading_history(
    ledger: MyLedger, settings: Settings
) -> None:
    day = (await ledger.database_now()).astimezone(UTC).date() + timedelta(days=20)
    assert await ledger.add_history_day("dead", day) == 0
    url = make_url(settings.database_url)
    reader = pymysql.connect(
        host=url.host or "127.0.0.1", port=url.port or 3306, user=url.username or "root",
        password=url.password or "", database=url.database,
    )  # fmt: skip
    try:
        with reader.cursor() as cursor:
            cursor.execute("BEGIN")
            cursor.execute("SELECT COUNT(*) FROM ledgerq_history")  # holds its metadata lock
        started = asyncio.get_running_loop().time()
        with pytest.raises(TransientStorageError, match=r"(?i)lock wait timeout"):
            await ledger.drop_history_day("dead", day)
        assert 1.5 < asyncio.get_running_loop().time() - started < 10
        assert ("dead", day) in {(d.status, d.day) for d in await ledger.history_days()}
        reader.rollback()
        assert await ledger.drop_history_day("dead", day) == 0
    finally:
        reader.close()
