"""Sticky retries (issue 26, item 9): ``@task(..., sticky_retry=seconds)`` sends a
retry to the worker that ran the failed attempt while it is live and within the
window, then to any worker; on the real ledger and broker.

Two real ``ledgerq worker`` processes of one app share one route, so without the
hold each retry would land on either (20 tasks all landing on their first worker
by chance: 1 in 2**20). The fallbacks are checked on the ledger's own rule
(``ledgerq_pick`` through the relay's batch): a hold whose worker left, or whose
window ran out, holds nothing.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Iterator
from typing import Any

import pika
import psycopg
import pytest

from ledgerq import Registry, TaskSpec
from ledgerq.broker.topology import Topology
from ledgerq.consumers.registry import RegistryError
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.routing import Subscription, routing_key, sticky_route
from tests.harness import Pipeline, db, enqueue_committed
from tests.support import spawn, until

WORKER = ("worker", "--app", "tests.apps.sticky_app", "--concurrency", "4", "--grace", "5")


@pytest.fixture(autouse=True)
def delete_routed_queues(settings: Settings) -> Iterator[None]:
    """The routed and personal broker queues the workers declared, deleted after."""
    yield
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queue, route FROM ledgerq_subscriptions WHERE route IS NOT NULL"
            " UNION SELECT queue, sticky_route FROM ledgerq_subscriptions"
            " WHERE sticky_route IS NOT NULL"
        ).fetchall()
    topology = Topology(settings.amqp_prefix)
    connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = connection.channel()
        for queue, route in rows:
            channel.queue_delete(topology.task_queue(routing_key(queue, route)).name)
    finally:
        connection.close()


def _attempt_workers(settings: Settings, ids: list[int]) -> dict[int, list[str]]:
    """Each task's attempts' workers, in order (history's log, the last one's too)."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT id, attempt_log FROM ledgerq_history WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    return {int(i): [entry["worker"] for entry in log] for i, log in rows}


def _live_workers(settings: Settings) -> set[str]:
    """The workers whose subscriptions are live."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT worker FROM ledgerq_subscriptions WHERE expires_at > now()"
        ).fetchall()
    return {str(r[0]) for r in rows}


def _stop(proc: subprocess.Popen[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    return out


async def test_each_retry_runs_on_the_worker_whose_attempt_failed(settings: Settings) -> None:
    workers = [spawn(settings, *WORKER) for _ in range(2)]
    try:
        await until("both workers subscribed", lambda: len(_live_workers(settings)) == 2)
        with db(settings) as conn:
            routes = conn.execute("SELECT sticky_route FROM ledgerq_subscriptions").fetchall()
        assert len({r[0] for r in routes}) == 2, routes  # each its own personal route
        ids = enqueue_committed(
            settings,
            [TaskSpec("sticky.flaky", {"n": n}, retry=[1], max_attempts=3) for n in range(20)],
        )
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            statuses = await pipe.settle(ids, timeout=60)
        assert set(statuses.values()) == {"succeeded"}, statuses
        runs = _attempt_workers(settings, ids)
        assert all(len(w) == 2 for w in runs.values()), runs
        assert all(first == second for first, second in runs.values()), runs
        assert len({first for first, _ in runs.values()}) == 2, "both workers ran first attempts"
    finally:
        for proc in workers:
            _stop(proc)


async def test_a_retry_held_for_a_worker_that_stopped_runs_on_another(settings: Settings) -> None:
    first = spawn(settings, *WORKER)
    await until("the first worker subscribed", lambda: len(_live_workers(settings)) == 1)
    [gone] = _live_workers(settings)
    ids = enqueue_committed(
        settings, [TaskSpec("sticky.flaky", {"n": n}, retry=[4], max_attempts=3) for n in range(4)]
    )
    async with Pipeline(settings, Registry(), start_worker=False) as pipe:

        def held() -> bool:
            with db(settings) as conn:
                [(n,)] = conn.execute(
                    "SELECT count(*) FROM ledgerq_tasks WHERE id = ANY(%s) AND status = 'pending'"
                    " AND sticky_worker = %s AND sticky_until > now() + interval '30 s'",
                    (ids, gone),
                ).fetchall()
            return int(n) == len(ids)

        await pipe.settle(ids, timeout=30, until=("pending",))  # published, then retried
        await until("every first attempt failed on the first worker", held)
        _stop(first)  # within the hold: its subscriptions expire at once
        second = spawn(settings, *WORKER)
        try:
            statuses = await pipe.settle(ids, timeout=60)
        finally:
            _stop(second)
    assert set(statuses.values()) == {"succeeded"}, statuses
    runs = _attempt_workers(settings, ids)
    assert all(w[0] == gone and w[1] != gone for w in runs.values()), runs


async def _held_route(ledger: PgLedger, task_id: int) -> str:
    """Where the relay's next batch would publish ``task_id`` (its window's route)."""
    async with ledger.publish_batch(100) as batch:
        [row] = [r for r in batch.rows if r.id == task_id]
        return row.route or ""


async def test_the_hold_lapses_with_its_window_or_its_worker(
    settings: Settings, ledger: PgLedger
) -> None:
    own = sticky_route("w-a")
    await ledger.subscribe("w-a", [Subscription("default", frozenset({"k"}), None, 5, own)], 600)
    await ledger.subscribe("w-b", [Subscription("default", frozenset({"k"}), None, 5)], 600)
    shared = Subscription("default", frozenset({"k"})).route
    [task_id] = enqueue_committed(settings, [TaskSpec("k", {})])

    def hold(until: str, worker: str = "w-a") -> None:
        with db(settings) as conn:
            conn.execute(
                "UPDATE ledgerq_tasks SET sticky_worker = %s, sticky_until = now() + %s::interval"
                " WHERE id = %s",
                (worker, until, task_id),
            )

    assert await _held_route(ledger, task_id) == shared  # no hold: the shared route
    hold("1 hour")
    assert await _held_route(ledger, task_id) == own  # held: only w-a's own route
    hold("-1 second")
    assert await _held_route(ledger, task_id) == shared  # the window ran out
    hold("1 hour", worker="w-b")
    assert await _held_route(ledger, task_id) == shared  # w-b has no personal route
    hold("1 hour")
    await ledger.unsubscribe("w-a")
    assert await _held_route(ledger, task_id) == shared  # w-a left: any worker
    windows = {(w["route"]) for w in await ledger.windows()}
    assert windows == {shared}


def test_sticky_retry_is_validated_naming_the_option() -> None:
    registry = Registry()
    for bad in (0, -1, float("nan"), True, "60", 10**6):
        with pytest.raises(RegistryError, match="sticky_retry"):

            @registry.task("sticky.bad", sticky_retry=bad)  # type: ignore[arg-type]
            def handler(payload: Any, ctx: Any) -> None: ...

    @registry.task("sticky.good", sticky_retry=30)
    def good(payload: Any, ctx: Any) -> None: ...

    assert registry.sticky_retries() == {"sticky.good": 30.0}
