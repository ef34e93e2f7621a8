"""A ledger split across two MariaDB databases (ledger shards), in process: what
tests/integration/test_ledger_shards.py checks on PostgreSQL, on the MySQL ledger.

- a shard key's tasks land on its database and their ids carry it, through the
  router on a SQLAlchemy Session and on a raw PyMySQL connection alike;
- ``migrate`` starts each database's AUTO_INCREMENT in its shard's range past
  every id history holds, and puts it back there when it was reset;
- a relay per shard and one worker (broker path, and ``--direct``) run each task
  once, its handler's write on the task's own shard;
- the reconciler's pass on each shard, and the operator's commands over all;
- a reordered list, an appended database and a list mixing servers are refused.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pymysql
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import AsyncTaskContext, Registry, Shards, TaskSpec, WrongShardError
from ledgerq.cli import cli
from ledgerq.cli.group import run_cli
from ledgerq.compose import open_operator_ledger, open_reconciler, open_relay, open_worker
from ledgerq.consumers.direct import DirectConfig
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError
from ledgerq.ledger.actions import Action
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.mysql import MyLedger
from ledgerq.ledger.mysql.engines import async_engine
from ledgerq.ledger.mysql.migrate import check_schema, upgrade
from ledgerq.ledger.split.ids import id_range, shard_for_key, shard_of_id
from ledgerq.ledger.split.ledger import ShardedLedger
from ledgerq.relay.reconciler import ReconcilerConfig
from ledgerq.relay.service import RelayConfig
from tests import mariadb
from tests.conftest import delete_broker_objects
from tests.harness import subscribe_queues
from tests.mariadb_broker import EFFECTS, query, routed
from tests.shard_dbs import create_my_shards, drop_my, empty_my

SHARDS = 2
TERMINAL = {"succeeded", "dead", "cancelled"}


@pytest.fixture(scope="module")
def my_sharded_base(mariadb_settings: Settings) -> Settings:
    return create_my_shards(mariadb_settings, SHARDS)


@pytest.fixture
async def my_sharded(my_sharded_base: Settings) -> AsyncIterator[Settings]:
    """Two empty MariaDB ledger shards, each with an effects table afresh, and a
    private AMQP prefix for one test."""
    await empty_my(my_sharded_base)
    for shard in my_sharded_base.ledger_shards():
        query(shard, "DROP TABLE IF EXISTS mariadb_effects")
        query(shard, EFFECTS)
    current = replace(my_sharded_base, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")
    yield current
    delete_broker_objects(current, routed(current.ledger_shard(0)))


def enqueue_by_key(settings: Settings, keys: list[str | None], kind: str) -> list[int]:
    """One committed transaction per task, on the key's shard, through the router."""
    shards = Shards(settings)
    try:
        ids = []
        for key in keys:
            with Session(shards.engine_for(key)) as session, session.begin():
                ids.append(shards.enqueue(session, key, kind, {"key": key}))
        return ids
    finally:
        shards.dispose()


def raw_connection(url: str) -> pymysql.Connection[Any]:
    parts = make_url(url)
    return pymysql.connect(
        host=parts.host or "127.0.0.1",
        port=parts.port or 3306,
        user=parts.username or "root",
        password=parts.password or "",
        database=parts.database,
    )


def key_on(shard: int) -> str:
    return next(f"k{n}" for n in range(1000) if shard_for_key(f"k{n}", SHARDS) == shard)


def held_ids(shard: Settings) -> list[int]:
    return sorted(int(i) for (i,) in query(shard, "SELECT id FROM ledgerq_tasks"))


async def test_keys_land_on_their_shard_and_ids_carry_it(my_sharded: Settings) -> None:
    keys = [f"account-{n}" for n in range(12)]
    ids = enqueue_by_key(my_sharded, [*keys, None, None], "myshards.noop")
    # The raw DB-API path: a PyMySQL connection the producer opened on the key's shard.
    shards = Shards(my_sharded)
    with raw_connection(shards.url_for(key_on(1))) as conn:
        raw = shards.enqueue(conn, key_on(1), "myshards.raw")
        many = shards.enqueue_many(conn, key_on(1), [TaskSpec("myshards.raw")] * 3)
        conn.commit()

    assert len(set(ids)) == len(ids)
    for key, task_id in zip(keys, ids, strict=False):
        assert shard_of_id(task_id) == shard_for_key(key, SHARDS)
    assert {shard_of_id(i) for i in ids[-2:]} == {0, 1}  # round robin without a key
    assert {shard_of_id(i) for i in [raw, *many]} == {1}
    everything = [*ids, raw, *many]
    async with open_operator_ledger(my_sharded) as ledger:
        for task_id in everything:
            assert (await ledger.show(task_id))["id"] == task_id
        assert (await ledger.stats())["total"] == len(everything)
    # Each database holds only its own shard's ids, from its own range.
    for k, shard in enumerate(my_sharded.ledger_shards()):
        first, last = id_range(k)
        held = held_ids(shard)
        assert held and all(first <= i <= last for i in held)
        assert held == sorted(i for i in everything if shard_of_id(i) == k)


async def test_enqueue_on_the_wrong_shard_is_refused_and_rolls_back(
    my_sharded: Settings,
) -> None:
    shards = Shards(my_sharded)
    try:
        with (
            pytest.raises(WrongShardError, match="belongs on shard 1 of 2"),
            Session(shards.engine_for(key_on(0))) as session,
            session.begin(),
        ):
            shards.enqueue(session, key_on(1), "myshards.noop")
    finally:
        shards.dispose()
    async with open_operator_ledger(my_sharded) as ledger:
        assert (await ledger.stats())["total"] == 0


async def test_migrate_starts_ids_past_history_even_after_a_reset(my_sharded: Settings) -> None:
    # A task of shard 1 finishes (cancelled: it moves to history, the hot table
    # empties); the counter is then reset to 1, as a TRUNCATE or an old server's
    # restart would. `migrate` puts it back past history's ids, in the range.
    [done] = enqueue_by_key(my_sharded, [key_on(1)], "myshards.noop")
    async with open_operator_ledger(my_sharded) as ledger:
        report = await ledger.act(Action.cancel(), TaskFilter(ids=(done,)), actor="test")
        assert report.changed == 1
    shard = my_sharded.ledger_shard(1)
    assert held_ids(shard) == []
    query(shard, "ALTER TABLE ledgerq_tasks AUTO_INCREMENT = 1")
    upgrade(my_sharded)
    upgrade(my_sharded)  # idempotent
    [after] = enqueue_by_key(my_sharded, [key_on(1)], "myshards.noop")
    assert after == done + 1 and shard_of_id(after) == 1


@pytest.mark.parametrize("path", ["broker", "direct"])
async def test_a_drain_over_both_shards_runs_each_task_once(
    my_sharded: Settings, path: str
) -> None:
    registry = Registry()

    @registry.task("myshards.effect")
    async def effect(payload: Any, ctx: AsyncTaskContext) -> None:
        # ctx.session is on the task's own shard: the effect commits with its status.
        await ctx.session.execute(
            text("INSERT INTO mariadb_effects (task_id, attempt, n) VALUES (:id, :a, 0)"),
            {"id": ctx.task.id, "a": ctx.task.attempts},
        )

    ids = enqueue_by_key(my_sharded, [f"acct-{n}" for n in range(24)], "myshards.effect")
    assert {shard_of_id(i) for i in ids} == {0, 1}
    config = WorkerConfig(concurrency=8, lease_s=30, grace_s=5)
    async with AsyncExitStack() as stack:
        relays = (
            [
                await stack.enter_async_context(
                    open_relay(my_sharded, RelayConfig(batch_size=50, confirm_timeout=5), shard=k)
                )
                for k in range(SHARDS)
            ]
            if path == "broker"
            else []
        )
        direct = DirectConfig(poll_s=0.1) if path == "direct" else None
        await stack.enter_async_context(open_worker(my_sharded, registry, config, direct=direct))
        ledger = await stack.enter_async_context(open_operator_ledger(my_sharded))
        deadline = time.monotonic() + 30
        while True:
            for relay in relays:
                await relay.run_once()
            tasks = [await ledger.show(i) for i in ids]
            if all(t["status"] in TERMINAL for t in tasks) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    assert {t["status"] for t in tasks} == {"succeeded"}
    published = {t["published_at"] is not None for t in tasks}
    assert published == {path == "broker"}  # direct claims never go through RabbitMQ
    for k, shard in enumerate(my_sharded.ledger_shards()):
        done = sorted(int(i) for (i,) in query(shard, "SELECT task_id FROM mariadb_effects"))
        assert done == sorted(i for i in ids if shard_of_id(i) == k)  # once each


async def test_the_reconciler_covers_every_shard(my_sharded: Settings) -> None:
    ids = enqueue_by_key(my_sharded, [None] * SHARDS, "myshards.noop")
    assert {shard_of_id(i) for i in ids} == {0, 1}
    async with open_operator_ledger(my_sharded) as ledger:
        assert isinstance(ledger, ShardedLedger)
        assert await ledger.backdate(ids, "run_at", 3600) == SHARDS  # the relay died long ago
        await subscribe_queues(ledger)  # type: ignore[arg-type]  # a live window on each shard
    for k in range(SHARDS):
        async with open_reconciler(my_sharded, ReconcilerConfig(stall_s=60), shard=k) as one:
            counts = await one.run_once()
            assert counts.overdue_published == 1, (k, counts)
    async with open_operator_ledger(my_sharded) as ledger:
        assert {(await ledger.show(i))["status"] for i in ids} == {"published"}


async def test_each_databases_reconciler_lock_is_its_own(my_sharded: Settings) -> None:
    """A named lock is the server's: the reconciler's carries its database, so the
    shards' passes (both databases on this one server) never skip each other, while
    a second reconciler of the same database still does."""
    ledgers = [
        MyLedger(async_engine(my_sharded.ledger_shard(k), "ledgerq-test-lock", pool_size=1))
        for k in (0, 1, 0)
    ]
    try:
        async with (
            ledgers[0].exclusive() as first,  # entered in this order
            ledgers[1].exclusive() as other_db,
            ledgers[2].exclusive() as same_db,
        ):
            assert (first, other_db, same_db) == (True, True, False)
    finally:
        for opened in ledgers:
            await opened.dispose()


def ledgerq(settings: Settings, capsys: pytest.CaptureFixture[str], *args: str) -> Any:
    """``ledgerq ARGS --json`` run in this process; its JSON output."""
    capsys.readouterr()
    run_cli(cli, ["--database-url", settings.database_url, *args, "--json"])
    return json.loads(capsys.readouterr().out)


def test_operator_commands_cover_every_shard(
    my_sharded: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = enqueue_by_key(my_sharded, [None] * 6, "myshards.cli")
    on_one = max(i for i in ids if shard_of_id(i) == 1)
    listed = ledgerq(my_sharded, capsys, "tasks", "list")
    stats = ledgerq(my_sharded, capsys, "stats")
    shown = ledgerq(my_sharded, capsys, "show", str(on_one))
    cancel = ledgerq(my_sharded, capsys, "tasks", "cancel", str(on_one), "--yes")
    page = ledgerq(my_sharded, capsys, "tasks", "list", "--limit", "2", "--before", str(on_one))
    after = ledgerq(my_sharded, capsys, "tasks", "list")

    assert [t["id"] for t in listed] == sorted(ids, reverse=True)  # shard 1's first
    assert stats["total"] == 6 and stats["by_status"] == {"pending": 6}
    assert shown["id"] == on_one and shown["kind"] == "myshards.cli"
    assert cancel["changed"] == 1
    assert [t["id"] for t in page] == sorted((i for i in ids if i < on_one), reverse=True)[:2]
    statuses = {t["id"]: t["status"] for t in after}
    assert statuses == {i: "cancelled" if i == on_one else "pending" for i in ids}


def test_a_reordered_list_is_refused(my_sharded_base: Settings) -> None:
    urls = list(my_sharded_base.database_urls)
    reordered = replace(my_sharded_base, database_url=",".join(reversed(urls)))
    with pytest.raises(ConfigError, match="as ledger shard 0, but it is ledger shard 1 of 2"):
        check_schema(reordered)
    with pytest.raises(ConfigError, match="it is ledger shard 1 \\(its task ids say so\\)"):
        upgrade(reordered)
    check_schema(my_sharded_base)  # the refusals changed nothing


def test_a_database_appended_to_the_list_needs_migrate(mariadb_settings: Settings) -> None:
    # A one-database ledger grows a second shard: until `ledgerq migrate` runs with
    # the new list, every command refuses it; then both databases say who they are.
    alone = create_my_shards(mariadb_settings, 1, tag="grow")
    url = make_url(alone.database_url)
    second = url.set(database=f"{url.database}_2").render_as_string(hide_password=False)
    mariadb.recreate(second)
    listed = replace(alone, database_url=f"{alone.database_url},{second}")
    try:
        with pytest.raises(
            ConfigError, match=r"lists 2 ledger shard.* was migrated as shard 0 of 1"
        ):
            check_schema(listed)
        upgrade(listed)
        check_schema(listed)
        assert enqueue_by_key(listed, [key_on(1)], "myshards.noop")[0] == id_range(1)[0]
        with pytest.raises(ConfigError, match=r"lists 1 ledger shard.* shard 0 of 2"):
            check_schema(alone)
    finally:
        drop_my(listed)


def test_a_list_mixing_servers_is_refused_in_one_line(
    my_sharded_base: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = f"{my_sharded_base.database_urls[0]},postgresql://postgres@127.0.0.1/lq_nowhere"
    with pytest.raises(SystemExit) as exited:
        run_cli(cli, ["--database-url", mixed, "stats"])
    assert exited.value.code == 78
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "lists MySQL / MariaDB and PostgreSQL databases" in err
