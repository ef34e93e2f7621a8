"""Retention on the real database: history partitioned by status and finish day, the
reconciler's upkeep pass, and ``ledgerq purge``.

Finished tasks of a given age are made by :func:`bury`, which inserts history rows
with a chosen ``finished_at`` (raw SQL: the test simulates time passing; nothing
in ledgerq writes a past finish time). Everything else goes through the seam or
the command line.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from alembic import command
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq import Action, TaskFilter, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.core.errors import StorageError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import alembic_config, upgrade
from ledgerq.relay.retention import TERMINAL, Retention, RetentionConfig, day_start
from tests.harness import enqueue_committed
from tests.support import ledgerq, ledgerq_env

Raw = psycopg.Connection[tuple[Any, ...]]

BURY = """
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at, finished_at)
SELECT nextval('ledgerq_task_id_seq'), 'old.task', 'default', '{}', 0, 0, now(), %s, 1, 5, 1,
       1, %s, %s
FROM generate_series(1, %s)
"""


@pytest.fixture
def raw(settings: Settings) -> Iterator[Raw]:
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        yield conn


@pytest.fixture(autouse=True)
async def no_past_days(ledger: PgLedger) -> None:
    """Each test starts with no day partition before today (earlier tests leave some),
    and with today's and the next days' in place."""
    today = (await ledger.database_now()).astimezone(UTC).date()
    for day in await ledger.history_days():
        if day.day < today:
            await ledger.drop_history_day(day.status, day.day)
    for status in ("succeeded", "dead", "cancelled"):
        for ahead in range(4):
            await ledger.add_history_day(status, today + timedelta(days=ahead))


def bury(raw: Raw, status: str, finished_at: datetime, n: int = 1) -> None:
    """``n`` finished tasks of ``status`` that finished at ``finished_at``."""
    raw.execute(BURY, (status, finished_at, finished_at, n))


def where(raw: Raw) -> dict[str, int]:
    """Rows by the partition that holds them."""
    rows = raw.execute(
        "SELECT tableoid::regclass::text, count(*) FROM ledgerq_history GROUP BY 1"
    ).fetchall()
    return {str(name): int(n) for name, n in rows}


def partition(status: str, when: datetime) -> str:
    return f"ledgerq_history_{status}_p{when.astimezone(UTC):%Y%m%d}"


async def noon(ledger: PgLedger, days_ago: int) -> datetime:
    """Noon UTC ``days_ago`` days before the database's today (far from any boundary)."""
    today = (await ledger.database_now()).astimezone(UTC).date()
    return day_start(today - timedelta(days=days_ago)) + timedelta(hours=12)


# -- the layout ---------------------------------------------------------------------------


async def test_finish_lands_in_todays_partition_and_a_missing_day_in_the_default(
    settings: Settings, ledger: PgLedger, raw: Raw
) -> None:
    first, second = enqueue_committed(settings, [TaskSpec("t.a"), TaskSpec("t.b")])
    today = await ledger.database_now()
    claimed = await ledger.claim([(first, 0), (second, 0)], "w", 30.0)
    await ledger.finish([Outcome.succeeded(claimed[0].fence)])
    assert where(raw) == {partition("succeeded", today): 1}

    # Without a partition for the day (upkeep lapsed), a finish still succeeds...
    assert await ledger.drop_history_day("dead", today.astimezone(UTC).date()) == 0
    await ledger.finish([Outcome.failed(claimed[1].fence, "boom", final=True)])
    assert where(raw) == {partition("succeeded", today): 1, "ledgerq_history_dead_default": 1}
    assert (await ledger.whereabouts([first, second])) == {first: "succeeded", second: "dead"}

    # ...and the day, created later, takes its rows out of the default partition.
    assert await ledger.add_history_day("dead", today.astimezone(UTC).date()) == 1
    assert where(raw) == {partition("succeeded", today): 1, partition("dead", today): 1}
    assert await ledger.add_history_day("dead", today.astimezone(UTC).date()) is None


async def test_a_finish_time_outside_every_day_goes_to_the_default_partition(
    ledger: PgLedger, raw: Raw
) -> None:
    bury(raw, "succeeded", datetime(2001, 1, 1, tzinfo=UTC))
    raw.execute(
        "INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, "
        "status, attempts, max_attempts, epoch, publishes, created_at) VALUES "
        "(nextval('ledgerq_task_id_seq'), 'k', 'q', '{}', 0, 0, now(), 'cancelled', 0, 1, 0, "
        "0, now())"  # no finish time at all
    )
    assert where(raw) == {
        "ledgerq_history_succeeded_default": 1,
        "ledgerq_history_cancelled_default": 1,
    }
    assert (await ledger.stats())["by_status"] == {"succeeded": 1, "cancelled": 1}


def indexes(settings: Settings) -> set[str]:
    """The indexes of ``ledgerq_history`` itself (not those of its partitions)."""
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        rows = conn.execute(
            "SELECT indexrelid::regclass::text FROM pg_index "
            "WHERE indrelid = 'ledgerq_history'::regclass"
        ).fetchall()
    return {str(name) for (name,) in rows}


def test_the_migration_upgrades_a_ledger_with_history_in_place(base_settings: Settings) -> None:
    url = make_url(base_settings.database_url)
    name = f"{url.database}_retention_upgrade"
    settings = replace(base_settings, database_url=url.set(database=name).render_as_string(False))
    maintenance = libpq_url(url.set(database="postgres").render_as_string(False))
    drop = sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(drop)
    try:
        upgrade(settings, "0003")  # the ledger as it was, with a history
        with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
            conn.execute(
                "INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, "
                "status, attempts, max_attempts, epoch, publishes, created_at, finished_at) "
                "SELECT g, 'old', 'default', jsonb_build_object('n', g), 0, 0, now(), "
                "(ARRAY['succeeded', 'dead'])[1 + g % 2], 1, 5, 1, 1, now(), "
                "timestamptz '2026-01-10 12:00+00' - make_interval(days => g % 3) "
                "FROM generate_series(1, 300) AS g"
            )
            # An index a later migration might have added: it moves with the table.
            conn.execute("CREATE INDEX ledgerq_history_extra ON ledgerq_history (kind, created_at)")
            before = conn.execute("SELECT * FROM ledgerq_history ORDER BY id").fetchall()
        upgrade(settings, "0004")  # this migration (later ones add columns of their own)
        with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
            after = conn.execute("SELECT * FROM ledgerq_history ORDER BY id").fetchall()
            placed: dict[str, int] = dict(
                conn.execute(
                    "SELECT tableoid::regclass::text, count(*) FROM ledgerq_history GROUP BY 1"
                ).fetchall()
            )
            columns = conn.execute(
                "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), "
                "a.attnotnull FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relname IN ('ledgerq_tasks', 'ledgerq_history') AND a.attnum > 0 "
                "AND NOT a.attisdropped ORDER BY c.relname, a.attnum"
            ).fetchall()
        assert after == before  # every row, every column, unchanged
        assert placed == {
            f"ledgerq_history_{status}_p202601{day:02d}": 50
            for status in ("succeeded", "dead")
            for day in (8, 9, 10)
        }
        history = [c[2:] for c in columns if c[0] == "ledgerq_history"]
        tasks = [c[2:] for c in columns if c[0] == "ledgerq_tasks"]
        assert history == tasks  # same names, types and NOT NULL, in the same order
        assert indexes(settings) == {
            "ledgerq_history_id", "ledgerq_history_finished", "ledgerq_history_status_kind",
            "ledgerq_history_business_key", "ledgerq_history_parent", "ledgerq_history_extra",
        }  # fmt: skip

        command.downgrade(alembic_config(settings.database_url), "0003")
        with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
            assert conn.execute("SELECT * FROM ledgerq_history ORDER BY id").fetchall() == before
        assert indexes(settings) == {
            "ledgerq_history_pk", "ledgerq_history_finished", "ledgerq_history_status_kind",
            "ledgerq_history_business_key", "ledgerq_history_parent", "ledgerq_history_extra",
        }  # fmt: skip
    finally:
        with psycopg.connect(maintenance, autocommit=True) as conn:
            conn.execute(drop)


# -- the reconciler's upkeep pass ---------------------------------------------------------


async def test_the_upkeep_pass_creates_upcoming_days_and_drops_expired_ones(
    ledger: PgLedger, raw: Raw
) -> None:
    today = (await ledger.database_now()).astimezone(UTC).date()
    await ledger.drop_history_day("succeeded", today + timedelta(days=2))
    ten_days_ago, three_days_ago = await noon(ledger, 10), await noon(ledger, 3)
    for status in ("succeeded", "dead"):
        await ledger.add_history_day(status, ten_days_ago.date())
        bury(raw, status, ten_days_ago, 40)
        bury(raw, status, three_days_ago, 5)  # no partition: in the default one
    bury(raw, "succeeded", await noon(ledger, 12), 7)  # expired, in the default partition

    retention = Retention(ledger, RetentionConfig(keep={"succeeded": timedelta(days=7)}))
    counts = await retention.run_once()

    assert (counts.created, counts.dropped, counts.dropped_rows) == (1, 1, 40)
    assert counts.deleted_rows == 7 and counts.by_status == {"succeeded": 47}
    days = {(d.status, d.day) for d in await ledger.history_days()}
    for status in ("succeeded", "dead", "cancelled"):
        assert {(status, today + timedelta(days=n)) for n in range(4)} <= days
    assert ("succeeded", ten_days_ago.date()) not in days
    assert ("dead", ten_days_ago.date()) in days  # dead tasks are kept (not configured)
    assert where(raw) == {
        "ledgerq_history_succeeded_default": 5,
        "ledgerq_history_dead_default": 5,
        partition("dead", ten_days_ago): 40,
    }
    again = await retention.run_once()
    assert (again.created, again.dropped, again.removed) == (0, 0, 0)


async def test_the_upkeep_pass_keeps_a_day_until_all_of_it_has_expired(
    ledger: PgLedger, raw: Raw
) -> None:
    # The day the cutoff falls in is partly expired: the pass keeps all of it, an
    # exact purge deletes its expired part in batches.
    retention = Retention(ledger, RetentionConfig(keep={"dead": timedelta(days=7.5)}))
    cutoff = (await retention.cutoffs())["dead"]
    opening = day_start(cutoff.astimezone(UTC).date())
    await ledger.add_history_day("dead", opening.date())
    bury(raw, "dead", opening + (cutoff - opening) / 2, 3)  # expired
    bury(raw, "dead", cutoff + (opening + timedelta(days=1) - cutoff) / 2, 2)  # not yet
    assert (await retention.run_once()).removed == 0

    counts = await retention.purge({"dead": cutoff})
    assert (counts.dropped, counts.deleted_rows) == (0, 3)
    assert where(raw) == {partition("dead", opening): 2}


async def test_a_reconciler_pass_applies_retention_from_the_settings(
    settings: Settings, raw: Raw, ledger: PgLedger
) -> None:
    old = await noon(ledger, 3)
    await ledger.add_history_day("cancelled", old.date())
    bury(raw, "cancelled", old, 4)
    bury(raw, "succeeded", old, 2)
    result = ledgerq(
        settings, "reconcile", "--json", LEDGERQ_RETENTION_CANCELLED_DAYS="1.5",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    retention = json.loads(result.stdout)["retention"]
    assert (retention["dropped"], retention["removed"]) == (1, 4)
    assert where(raw) == {"ledgerq_history_succeeded_default": 2}
    # The dashboard's rollup ran first, in the same pass, and counted all six.
    rollup = json.loads(result.stdout)["rollup"]
    assert (rollup["tasks"], rollup["caught_up"]) == (6, True)


# -- ledgerq purge ------------------------------------------------------------------------


async def test_purge_removes_only_what_it_should_and_a_dry_run_nothing(
    settings: Settings, ledger: PgLedger, raw: Raw
) -> None:
    for days_ago in (20, 10, 2):
        when = await noon(ledger, days_ago)
        for status in ("succeeded", "dead", "cancelled"):
            await ledger.add_history_day(status, when.date())
            bury(raw, status, when, 3)
    bury(raw, "dead", await noon(ledger, 30), 2)  # in the default partition
    [live] = enqueue_committed(settings, [TaskSpec("t.live")])
    before = where(raw)

    dry = ledgerq(
        settings, "purge", "--older-than", "5d", "--status", "dead", "--dry-run", "--json"
    )
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["matched"] == {"dead": 8}
    assert where(raw) == before

    done = ledgerq(
        settings, "purge", "--older-than", "5d", "--status", "dead", "--status", "cancelled",
        "--yes", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    counts = json.loads(done.stdout)
    assert counts["matched"] == {"dead": 8, "cancelled": 6}
    assert (counts["removed"], counts["dropped"], counts["deleted_rows"]) == (14, 4, 2)
    assert counts["by_status"] == {"dead": 8, "cancelled": 6}
    remaining = await ledger.stats()
    assert remaining["by_status"] == {"succeeded": 9, "dead": 3, "cancelled": 3, "pending": 1}
    assert (await ledger.show(live))["location"] == "live"

    # Without --older-than: each status's retention from the settings.
    by_settings = ledgerq(
        settings, "purge", "--yes", "--json", LEDGERQ_RETENTION_SUCCEEDED_DAYS="15",
        LEDGERQ_RETENTION_DEAD_DAYS="0", LEDGERQ_RETENTION_CANCELLED_DAYS="0",
    )  # fmt: skip
    assert by_settings.returncode == 0, by_settings.stderr
    assert json.loads(by_settings.stdout)["matched"] == {"succeeded": 3}
    text = ledgerq(settings, "purge", "--older-than", "1d", "--status", "succeeded", "--yes")
    assert text.returncode == 0, text.stderr
    assert "removed 6 finished tasks (succeeded 6): 2 day partitions dropped" in text.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--status", "running"], "'running' is not a finished status"),
        (["--status", "bogus"], "'bogus' is not a finished status"),
        (["--older-than", "soon"], "cannot read 'soon' as a duration"),
        (["--older-than", "0d"], "more than 0"),
        ([], "refusing without a terminal to confirm on: pass --yes"),
    ],
)
async def test_purge_refuses_bad_input_and_an_unconfirmable_purge_in_one_line(
    settings: Settings, ledger: PgLedger, raw: Raw, args: list[str], message: str
) -> None:
    bury(raw, "dead", await noon(ledger, 200), 1)
    result = ledgerq(settings, "purge", *args)
    assert result.returncode == 64
    assert result.stderr.count("\n") == 1 and message in result.stderr, result.stderr
    assert where(raw) == {"ledgerq_history_dead_default": 1}


async def test_purge_asks_on_a_terminal_and_does_nothing_unless_told_yes(
    settings: Settings, ledger: PgLedger, raw: Raw
) -> None:
    bury(raw, "dead", await noon(ledger, 200), 2)

    def purge_answering(answer: str) -> tuple[int, str]:
        leader, follower = pty.openpty()
        with subprocess.Popen(
            [sys.executable, "-m", "ledgerq", "purge", "--status", "dead"],
            env=ledgerq_env(settings),
            stdin=follower,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as child:
            os.close(follower)
            os.write(leader, answer.encode())
            out, err = child.communicate(timeout=60)
        os.close(leader)
        return child.returncode, out + err

    code, output = purge_answering("n\n")
    assert code != 0 and "Remove 2 finished tasks (dead before" in output
    assert where(raw) == {"ledgerq_history_dead_default": 2}
    code, output = purge_answering("y\n")
    assert code == 0 and "removed 2 finished tasks" in output
    assert where(raw) == {}


async def test_the_partition_functions_refuse_anything_but_a_terminal_status(
    ledger: PgLedger,
) -> None:
    today = (await ledger.database_now()).astimezone(UTC).date()
    for status in ("running", "succeeded; DROP TABLE ledgerq_tasks", ""):
        with pytest.raises(StorageError, match="not a terminal status"):
            await ledger.add_history_day(status, today)
        with pytest.raises(StorageError, match="not a terminal status"):
            await ledger.purge_history_batch(status, datetime.now(UTC), 10)
    assert (await ledger.stats())["total"] == 0


# -- dependency edges (after=, migration 0022) ---------------------------------------------


def edges(raw: Raw) -> set[tuple[int, int]]:
    rows = raw.execute("SELECT task_id, depends_on FROM ledgerq_dependencies").fetchall()
    return {(int(t), int(d)) for t, d in rows}


async def test_retention_prunes_the_edges_of_ended_dependents_only_when_every_status_expires(
    settings: Settings, ledger: PgLedger, raw: Raw
) -> None:
    old, fresh, running = enqueue_committed(settings, [TaskSpec("t.dep")] * 3)
    old_dependent, fresh_dependent, waiting = enqueue_committed(
        settings,
        [
            TaskSpec("t.dep", after=[old]),
            TaskSpec("t.dep", after=[fresh]),
            TaskSpec("t.dep", after=[running]),  # waits: its edge is never pruned
        ],
    )
    await ledger.act(Action.cancel(), TaskFilter(ids=(old, fresh)), actor="test")
    assert await ledger.whereabouts([old_dependent, fresh_dependent, waiting]) == {
        old_dependent: "cancelled",
        fresh_dependent: "cancelled",
        waiting: "waiting",
    }
    # time passes for one dependent (its end, as its edge's stamp says)
    raw.execute(
        "UPDATE ledgerq_dependencies SET ended_at = %s WHERE task_id = %s",
        (await noon(ledger, 10), old_dependent),
    )
    week = timedelta(days=7)

    # a status kept forever (dead here) keeps every edge: its tasks' edges could be any
    kept = Retention(ledger, RetentionConfig(keep={"succeeded": week, "cancelled": week}))
    assert (await kept.run_once()).edges_pruned == 0
    counts = await Retention(ledger, RetentionConfig(keep=dict.fromkeys(TERMINAL, week))).run_once()
    assert counts.edges_pruned == 1 and counts.as_dict()["edges_pruned"] == 1
    assert edges(raw) == {(fresh_dependent, fresh), (waiting, running)}

    # a purge prunes too, with the oldest of its cutoffs, when it purges every status
    later = await ledger.database_now() + timedelta(hours=1)
    retention = Retention(ledger)
    assert (await retention.purge({"cancelled": later})).edges_pruned == 0
    assert (await retention.purge(dict.fromkeys(TERMINAL, later))).edges_pruned == 1
    assert edges(raw) == {(waiting, running)}
    assert (await ledger.find(waiting))["dependencies"][0]["status"] == "pending"
