"""The ``ledgerq`` command as a person or a script runs it: real processes."""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Awaitable, Callable
from datetime import datetime

import pytest

from ledgerq import Registry, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import EFFECTS_DDL, Pipeline, db, effects, enqueue_committed
from tests.support import ledgerq, spawn


def test_stats_json_and_show(settings: Settings) -> None:
    ids = enqueue_committed(
        settings,
        [TaskSpec("cli.a", {"n": i}) for i in range(3)]
        + [TaskSpec("cli.b", {}, business_key="order-7")],
    )
    result = ledgerq(settings, "stats", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["total"] == 4
    assert data["by_status"] == {"pending": 4}
    assert data["by_kind"] == {"cli.a": {"pending": 3}, "cli.b": {"pending": 1}}

    shown = ledgerq(settings, "show", str(ids[-1]), "--json")
    assert shown.returncode == 0, shown.stderr
    task = json.loads(shown.stdout)
    assert (task["kind"], task["status"], task["business_key"]) == ("cli.b", "pending", "order-7")
    assert task["attempts"] == 0 and task["last_error"] is None

    human = ledgerq(settings, "show", str(ids[0]))
    assert human.returncode == 0 and "cli.a" in human.stdout and "pending" in human.stdout


def test_unknown_task_and_unreachable_services_give_one_clear_line(settings: Settings) -> None:
    missing = ledgerq(settings, "show", "987654321")
    assert missing.returncode == 1  # a failure, not a usage or configuration error
    assert missing.stderr.strip() == "ledgerq: no task with id 987654321"

    no_db = ledgerq(
        settings, "stats", LEDGERQ_DATABASE_URL="postgresql+psycopg://postgres@127.0.0.1:1/nowhere"
    )
    assert no_db.returncode == 69  # EX_UNAVAILABLE
    lines = no_db.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerq: cannot reach PostgreSQL at"), lines

    no_broker = ledgerq(settings, "relay", LEDGERQ_AMQP_URL="amqp://guest:guest@127.0.0.1:1/")
    assert no_broker.returncode == 69
    lines = no_broker.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ledgerq: cannot reach RabbitMQ at"), lines


def test_bad_options_and_environment_are_one_line_errors(settings: Settings) -> None:
    relay = ledgerq(settings, "relay", "--batch-size", "0")
    assert relay.returncode == 64 and "batch_size must be 1..10000" in relay.stderr  # EX_USAGE
    assert "Traceback" not in relay.stderr
    worker = ledgerq(settings, "worker", "--app", "tests.apps.slow_app", "--queues", "a b")
    assert worker.returncode == 64 and "malformed" in worker.stderr
    env = ledgerq(settings, "stats", LEDGERQ_CONNECT_WAIT_S="soon")
    assert env.returncode == 78  # EX_CONFIG
    assert env.stderr.strip() == (
        "ledgerq: LEDGERQ_CONNECT_WAIT_S must be a number of seconds from 0 to 3600, got 'soon'"
    )


def test_bad_app_module_is_a_clear_error(settings: Settings) -> None:
    result = ledgerq(settings, "worker", "--app", "no_such_module_xyz")
    assert result.returncode == 64
    assert "cannot import --app 'no_such_module_xyz'" in result.stderr
    assert "Traceback" not in result.stderr


async def _wait_for(predicate: Callable[[], Awaitable[bool]], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not await predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


async def _sigterm_once_running(
    settings: Settings, ledger: PgLedger, ids: list[int], *worker_args: str
) -> tuple[int, str, float]:
    """A worker process (slow_app) runs until every one of ``ids`` is running, then
    gets SIGTERM: its exit code, its output, and the seconds from SIGTERM to exit."""
    worker = spawn(settings, "-v", "worker", "--app", "tests.apps.slow_app", *worker_args)
    try:
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            await pipe.settle(ids, until=("published", "running"))

        async def all_running() -> bool:
            return set((await ledger.whereabouts(ids)).values()) == {"running"}

        await _wait_for(all_running, 30, f"all {len(ids)} tasks running")
        worker.send_signal(signal.SIGTERM)
        stopped = time.monotonic()
        output, _ = await asyncio.to_thread(worker.communicate, timeout=60)
        return worker.returncode, output, time.monotonic() - stopped
    finally:
        if worker.poll() is None:
            worker.kill()


async def test_sigterm_drains_in_flight_tasks_then_exits_zero(
    settings: Settings, ledger: PgLedger
) -> None:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    ids = enqueue_committed(settings, [TaskSpec("test.slow", {"seconds": 1.5}) for _ in range(4)])
    code, output, _ = await _sigterm_once_running(
        settings, ledger, ids, "--concurrency", "4", "--grace", "20"
    )
    assert code == 0, output
    assert "draining 4 in-flight tasks" in output
    assert await ledger.whereabouts(ids) == dict.fromkeys(ids, "succeeded")
    assert sorted(effects(settings)) == sorted((i, 1) for i in ids)


async def test_sigterm_drains_every_lane_at_once(settings: Settings, ledger: PgLedger) -> None:
    """``--queues a=1,b=1`` runs two lanes (a worker each) in one process. On SIGTERM
    they drain together: handlers that outlive the grace hold the stop for one
    grace, not one per lane (lanes drained one after another took 2 x grace)."""
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    grace = 4.0
    ids = enqueue_committed(
        settings, [TaskSpec("test.slow", {"seconds": 60}, queue=q) for q in ("a", "b")]
    )
    code, output, took = await _sigterm_once_running(
        settings, ledger, ids, "--queues", "a=1,b=1", "--grace", str(grace)
    )
    assert code == 0, output
    drains = [line for line in output.splitlines() if "draining 1 in-flight tasks" in line]
    assert len(drains) == 2, output
    # Together, by the worker's own log clock (one after another, the second would
    # begin a whole grace after the first): how long the process then takes to close
    # its connections and exit, which a loaded machine stretches, is no part of it.
    began = [datetime.strptime(line[:23], "%Y-%m-%d %H:%M:%S,%f") for line in drains]
    assert abs(began[1] - began[0]).total_seconds() < grace / 2, drains
    # one grace, then the teardown: the upper bound is a backstop, generous for a
    # loaded machine (two graces in a row would also show in the log check above)
    assert grace <= took < grace + 15, (took, output)
    assert effects(settings) == []  # both handlers were cut at the grace, nothing committed


@pytest.mark.parametrize("kind", ["test.sync_write"])
async def test_worker_process_runs_sync_handlers_end_to_end(settings: Settings, kind: str) -> None:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    ids = enqueue_committed(settings, [TaskSpec(kind, {}) for _ in range(20)])
    worker = spawn(settings, "worker", "--app", "tests.apps.slow_app")
    try:
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            await pipe.settle(ids)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(worker.communicate, timeout=60)
    assert worker.returncode == 0, output
    assert sorted(effects(settings)) == sorted((i, 1) for i in ids)
