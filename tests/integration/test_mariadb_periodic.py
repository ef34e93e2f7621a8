"""Periodic tasks on the MariaDB ledger (issue 29): two real ``ledgerq worker
--direct`` processes, each with the periodic kind ``loop.tick`` (every second)
in its app, race to enqueue every period; the permanent key
(``ledgerq_unique_keys``, taken by ``once=True`` in the enqueuing transaction)
lets exactly one task through per period, and each runs once."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy import text

from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import MyLedger
from tests.support import spawn, until

PERIODS = 3


@pytest.fixture
async def mariadb(mariadb_settings: Settings) -> AsyncIterator[Settings]:
    ledger = MyLedger(async_engine(mariadb_settings, "ledgerq-test-periodic", pool_size=1))
    await ledger.truncate()
    await ledger.dispose()
    # no broker: a direct worker takes no AMQP connection
    yield replace(mariadb_settings, amqp_url="amqp://guest:guest@127.0.0.1:1/")


async def _rows(settings: Settings, sql: str) -> list[Any]:
    engine = async_engine(settings, "ledgerq-test-periodic-read", pool_size=1)
    try:
        async with engine.connect() as conn:
            return list(await conn.execute(text(sql)))
    finally:
        await engine.dispose()


def _stop(worker: subprocess.Popen[str]) -> str:
    worker.send_signal(signal.SIGTERM)
    try:
        return worker.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        worker.kill()
        return worker.communicate()[0]


async def test_two_workers_enqueue_each_period_once_and_it_runs_once(mariadb: Settings) -> None:
    workers = [
        spawn(mariadb, "worker", "--direct", "--app", "tests.apps.periodic_app") for _ in range(2)
    ]
    try:

        async def periods_ran() -> bool:
            assert all(w.poll() is None for w in workers), "a worker exited"
            done = await _rows(mariadb, "SELECT id FROM ledgerq_history WHERE kind = 'loop.tick'")
            return len(done) >= PERIODS

        await until(f"{PERIODS} periods of loop.tick to run", periods_ran, timeout=60)
    finally:
        outputs = [_stop(w) for w in workers]
    for worker, output in zip(workers, outputs, strict=True):
        assert worker.returncode == 0, output
        assert "Traceback" not in output, output

    tasks = await _rows(
        mariadb,
        "SELECT business_key, status, attempts FROM ledgerq_history WHERE kind = 'loop.tick'"
        " UNION ALL SELECT business_key, status, attempts FROM ledgerq_tasks"
        " WHERE kind = 'loop.tick'",
    )
    keys = await _rows(
        mariadb,
        "SELECT business_key, task_id FROM ledgerq_unique_keys WHERE kind = 'loop.tick'",
    )
    per_period = [str(t.business_key) for t in tasks]
    assert len(per_period) == len(set(per_period)), f"a period was enqueued twice: {per_period}"
    assert all(key.startswith("periodic:") for key in per_period)
    assert {str(k.business_key) for k in keys} == set(per_period)
    ran = [t for t in tasks if t.status == "succeeded"]
    assert len(ran) >= PERIODS and all(t.attempts == 1 for t in ran)
