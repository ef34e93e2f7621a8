"""A ledger split across three databases on the local server (ledger shards)."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

from ledgerq import AsyncTaskContext, Registry, Shards, WrongShardError, enqueue
from ledgerq.compose import (
    open_ledger,
    open_operator_ledger,
    open_reconciler,
    open_relay,
    open_worker,
)
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError, TaskNotFoundError
from ledgerq.ledger.pg.migrate import check_schema, upgrade
from ledgerq.ledger.split.ids import id_range, shard_for_key, shard_of_id
from ledgerq.ledger.split.ledger import ShardedLedger
from ledgerq.relay.reconciler import ReconcilerConfig
from ledgerq.relay.service import RelayConfig
from tests.conftest import delete_broker_objects, drop_database, recreate_database
from tests.harness import EFFECTS_DDL, db, subscribe_queues
from tests.shard_dbs import create_shards, empty
from tests.support import ledgerq

SHARDS = 3
TERMINAL = {"succeeded", "dead", "cancelled"}


@pytest.fixture(scope="session")
def sharded_base(base_settings: Settings) -> Settings:
    return create_shards(base_settings, SHARDS)


@pytest.fixture
async def sharded(sharded_base: Settings) -> AsyncIterator[Settings]:
    """Three empty ledger shards and a private AMQP prefix for one test."""
    await empty(sharded_base)
    for shard in sharded_base.ledger_shards():
        with db(shard) as conn:
            conn.execute("DROP TABLE IF EXISTS test_effects")
    current = replace(sharded_base, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}")
    yield current
    delete_broker_objects(current)


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


async def test_keys_land_on_their_shard_and_ids_carry_it(sharded: Settings) -> None:
    keys = [f"account-{n}" for n in range(30)]
    ids = enqueue_by_key(sharded, [*keys, None, None, None], "shards.noop")

    assert len(set(ids)) == len(ids)
    for key, task_id in zip(keys, ids, strict=False):
        assert shard_of_id(task_id) == shard_for_key(key, SHARDS)
    assert {shard_of_id(i) for i in ids[-3:]} == {0, 1, 2}  # round robin without a key
    async with open_operator_ledger(sharded) as ledger:
        for task_id in ids:
            assert (await ledger.show(task_id))["id"] == task_id
        assert (await ledger.stats())["total"] == len(ids)
    # Each database holds only its own shard's ids, from its own range.
    for k, shard in enumerate(sharded.ledger_shards()):
        first, last = id_range(k)
        with db(shard) as conn:
            held = [int(r[0]) for r in conn.execute("SELECT id FROM ledgerq_tasks")]
        assert held and all(first <= i <= last for i in held)
        assert sorted(held) == sorted(i for i in ids if shard_of_id(i) == k)


def key_on(shard: int) -> str:
    return next(f"k{n}" for n in range(1000) if shard_for_key(f"k{n}", SHARDS) == shard)


async def test_enqueue_on_the_wrong_shard_is_refused_and_rolls_back(sharded: Settings) -> None:
    shards = Shards(sharded)
    try:
        with (
            pytest.raises(WrongShardError, match="belongs on shard 1 of 3"),
            Session(shards.engine_for(key_on(0))) as session,
            session.begin(),
        ):
            shards.enqueue(session, key_on(1), "shards.noop")
    finally:
        shards.dispose()
    async with open_operator_ledger(sharded) as ledger:
        assert (await ledger.stats())["total"] == 0


async def test_pipeline_drains_every_shard_exactly_once(sharded: Settings) -> None:
    for shard in sharded.ledger_shards():
        with db(shard) as conn:
            conn.execute(EFFECTS_DDL)
    registry = Registry()

    @registry.task("shards.effect")
    async def effect(payload: Any, ctx: AsyncTaskContext) -> None:
        # ctx.session is on the task's own shard: the effect commits with its status.
        await ctx.session.execute(
            text("INSERT INTO test_effects (task_id, attempt) VALUES (:id, :a)"),
            {"id": ctx.task.id, "a": ctx.task.attempts},
        )

    ids = enqueue_by_key(sharded, [f"acct-{n}" for n in range(60)], "shards.effect")
    async with AsyncExitStack() as stack:
        relays = [
            await stack.enter_async_context(
                open_relay(sharded, RelayConfig(batch_size=50, confirm_timeout=5), shard=k)
            )
            for k in range(SHARDS)
        ]
        worker = await stack.enter_async_context(
            open_worker(sharded, registry, WorkerConfig(concurrency=8, lease_s=30, grace_s=5))
        )
        ledger = await stack.enter_async_context(open_operator_ledger(sharded))
        # The worker registered on every shard; the operator sees it once.
        live = [s for s in await ledger.subscriptions() if s["live"]]
        assert [(s["worker"], s["queue"]) for s in live] == [(worker.config.worker_id, "default")]
        deadline = time.monotonic() + 30
        while True:
            for relay in relays:
                await relay.run_once()
            tasks = [await ledger.show(i) for i in ids]
            if all(t["status"] in TERMINAL for t in tasks) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.05)
    assert {t["status"] for t in tasks} == {"succeeded"}
    for k, shard in enumerate(sharded.ledger_shards()):
        with db(shard) as conn:
            done = [int(r[0]) for r in conn.execute("SELECT task_id FROM test_effects")]
        assert sorted(done) == sorted(i for i in ids if shard_of_id(i) == k)  # once each


async def test_reconciler_covers_every_shard(sharded: Settings) -> None:
    ids = enqueue_by_key(sharded, [None] * SHARDS, "shards.noop")
    assert {shard_of_id(i) for i in ids} == {0, 1, 2}
    for k, shard in enumerate(sharded.ledger_shards()):  # as if the relay had died long ago
        with db(shard) as conn:
            conn.execute("UPDATE ledgerq_tasks SET run_at = now() - interval '1 hour'")
        async with open_ledger(sharded, "ledgerq-test", pool_size=1, shard=k) as one:
            await subscribe_queues(one)  # a live worker's window on every shard
    config = ReconcilerConfig(stall_s=60)
    published = 0
    for k in range(SHARDS):
        async with open_reconciler(sharded, config, shard=k) as reconciler:
            counts = await reconciler.run_once()
            assert counts.overdue_published == 1, (k, counts)
            published += counts.overdue_published
    assert published == SHARDS
    async with open_operator_ledger(sharded) as ledger:
        assert {(await ledger.show(i))["status"] for i in ids} == {"published"}


async def test_operator_commands_cover_every_shard(sharded: Settings) -> None:
    ids = enqueue_by_key(sharded, [None] * 6, "shards.cli")
    listed = json.loads(ledgerq(sharded, "tasks", "list", "--json").stdout)
    stats = json.loads(ledgerq(sharded, "stats", "--json").stdout)
    on_two = next(i for i in ids if shard_of_id(i) == 2)
    shown = json.loads(ledgerq(sharded, "show", str(on_two), "--json").stdout)
    cancel = ledgerq(sharded, "tasks", "cancel", str(on_two), "--yes", "--json")
    page = json.loads(
        ledgerq(sharded, "tasks", "list", "--json", "--limit", "2", "--before", str(on_two)).stdout
    )

    assert sorted(t["id"] for t in listed) == sorted(ids)
    assert [t["id"] for t in listed] == sorted(ids, reverse=True)
    assert stats["total"] == 6 and stats["by_status"] == {"pending": 6}
    assert shown["id"] == on_two and shown["kind"] == "shards.cli"
    assert cancel.returncode == 0, cancel.stderr
    assert json.loads(cancel.stdout)["changed"] == 1
    async with open_operator_ledger(sharded) as ledger:
        assert (await ledger.show(on_two))["status"] == "cancelled"
        assert {(await ledger.show(i))["status"] for i in ids if i != on_two} == {"pending"}
    assert [t["id"] for t in page] == sorted((i for i in ids if i < on_two), reverse=True)[:2]


def test_a_reordered_or_shortened_list_is_refused(sharded_base: Settings) -> None:
    urls = list(sharded_base.database_urls)
    reordered = replace(sharded_base, database_url=",".join([urls[1], urls[0], urls[2]]))
    shortened = replace(sharded_base, database_url=",".join(urls[:2]))
    alone = replace(sharded_base, database_url=urls[2])

    with pytest.raises(ConfigError, match="as ledger shard 0, but it is ledger shard 1 of 3"):
        check_schema(reordered)
    with pytest.raises(ConfigError, match="lists 2 ledger shard"):
        check_schema(shortened)
    with pytest.raises(ConfigError, match="as ledger shard 0, but it is ledger shard 2"):
        check_schema(alone)
    with pytest.raises(ConfigError, match="it is ledger shard 1 \\(its task ids say so\\)"):
        upgrade(reordered)
    done = ledgerq(reordered, "worker", "--app", "tests.apps.slow_app")
    assert done.returncode == 78
    assert done.stderr.strip().count("\n") == 0, done.stderr
    assert "restore the list's order" in done.stderr
    check_schema(sharded_base)  # the refusals changed nothing


def test_a_database_appended_to_the_list_needs_migrate(base_settings: Settings) -> None:
    # A one-database ledger grows a second shard: until `ledgerq migrate` runs with
    # the new list, every service refuses it; then both databases say who they are.
    url = make_url(base_settings.database_url)
    first, second = (
        url.set(database=f"{url.database}_grow{n}").render_as_string(hide_password=False)
        for n in (0, 1)
    )
    for name in (first, second):
        recreate_database(name)
    upgrade(replace(base_settings, database_url=first))
    listed = replace(base_settings, database_url=f"{first},{second}")
    try:
        with pytest.raises(
            ConfigError, match=r"lists 2 ledger shard.* was migrated as shard 0 of 1"
        ):
            check_schema(listed)
        upgrade(listed)
        check_schema(listed)
        with pytest.raises(ConfigError, match=r"lists 1 ledger shard.* shard 0 of 2"):
            check_schema(replace(base_settings, database_url=first))
    finally:
        for name in (first, second):
            drop_database(name)


async def test_plain_enqueue_without_a_router_lands_where_its_transaction_is(
    sharded: Settings,
) -> None:
    shards = Shards(sharded)
    try:
        engine = shards.engine_for(None)  # round robin: shard 0 first
        with Session(engine) as session, session.begin():
            task_id = enqueue(session, "shards.plain")
    finally:
        shards.dispose()
    assert shard_of_id(task_id) == 0
    assert Shards(sharded).check(task_id, None) == task_id
    async with open_operator_ledger(sharded) as ledger:
        assert (await ledger.find(task_id))["kind"] == "shards.plain"


@pytest.mark.parametrize("bad", ["2", "0,1"])
def test_direct_urls_must_match_the_shards(sharded_base: Settings, bad: str) -> None:
    urls = sharded_base.database_urls
    directs = {"2": ",".join(urls[:2]), "0,1": urls[0]}[bad]
    with pytest.raises(ConfigError, match="give one direct URL per ledger shard"):
        replace(sharded_base, direct_database_url=directs)


async def test_ids_of_a_shard_not_configured_match_nothing(sharded: Settings) -> None:
    stranger = id_range(7)[0]  # a delivery from a deployment with more shards, say
    [mine] = enqueue_by_key(sharded, [None], "shards.noop")
    async with open_operator_ledger(sharded) as ledger:
        assert isinstance(ledger, ShardedLedger)
        won = await ledger.claim([(stranger, 0), (mine, 0)], "w-1", 30.0)
        assert [t.id for t in won] == [mine]
        assert await ledger.whereabouts([stranger, mine]) == {mine: "running"}
        with pytest.raises(TaskNotFoundError, match="7 cannot exist here"):
            await ledger.show(stranger)
