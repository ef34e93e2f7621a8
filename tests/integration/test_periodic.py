"""Periodic tasks (issue 14) on the real ledger: exactly one task per period, however
many enqueuers race; after an outage only the latest missed period, once (or none);
and a worker with a periodic kind runs it end to end."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

from ledgerq import Registry
from ledgerq.compose import open_ledger
from ledgerq.consumers.periodic import PeriodicConfig, PeriodicEnqueuer, Schedule
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from tests.harness import Pipeline
from tests.support import until


def periods(settings: Settings, kind: str) -> Counter[str]:
    """How many tasks each period's key has, live and finished."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT business_key FROM ledgerq_tasks WHERE kind = %s "
            "UNION ALL SELECT business_key FROM ledgerq_history WHERE kind = %s",
            (kind, kind),
        ).fetchall()
    return Counter(str(r[0]) for r in rows)


@dataclass
class Clock:
    now: datetime

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
async def ledgers(settings: Settings) -> AsyncIterator[list[PgLedger]]:
    """Three ledgers of their own, as three workers have."""
    async with (
        open_ledger(settings, "ledgerq-periodic-1", pool_size=1) as one,
        open_ledger(settings, "ledgerq-periodic-2", pool_size=1) as two,
        open_ledger(settings, "ledgerq-periodic-3", pool_size=1) as three,
    ):
        yield [one, two, three]


async def test_three_enqueuers_enqueue_exactly_one_task_per_period(
    settings: Settings, ledgers: list[PgLedger]
) -> None:
    schedules = [Schedule("t.tick", every=1), Schedule("t.cron", cron="* * * * *")]
    config = PeriodicConfig(interval_s=0.05)
    enqueuers = [PeriodicEnqueuer(ledger, schedules, config) for ledger in ledgers]
    stop = asyncio.Event()
    started = time.monotonic()
    loops = [asyncio.create_task(e.run(stop)) for e in enqueuers]
    # three periods at least (a condition, not a fixed run: a loaded machine may be slow)
    await until("three periods of t.tick", lambda: len(periods(settings, "t.tick")) >= 3)
    stop.set()
    await asyncio.gather(*loops)
    ran = time.monotonic() - started
    ticks = periods(settings, "t.tick")
    # no more periods than the run spanned (one 1 s period per started second)
    assert 3 <= len(ticks) <= ran + 2, (ticks, ran)
    assert set(ticks.values()) == {1}, ticks
    minutes = periods(settings, "t.cron")  # 2 if the run crossed a minute boundary
    assert set(minutes.values()) == {1} and len(minutes) <= 2, minutes


async def test_racing_on_one_period_inserts_one_task(
    settings: Settings, ledgers: list[PgLedger]
) -> None:
    """The same pass of three enqueuers at once, twenty times over (a new period
    each time): the permanent key lets exactly one through, never two, never none."""
    clock = Clock(datetime(2026, 1, 1, tzinfo=UTC))
    schedules = [Schedule("t.race", every=60)]
    enqueuers = [PeriodicEnqueuer(ledger, schedules, clock=clock) for ledger in ledgers]
    for _ in range(20):
        counts = await asyncio.gather(*(e.run_once() for e in enqueuers))
        assert sorted(c.enqueued for c in counts) == [0, 0, 1]
        clock.now += timedelta(seconds=60)
    assert len(periods(settings, "t.race")) == 20


async def test_after_an_outage_only_the_latest_period_is_enqueued_once(
    settings: Settings, ledgers: list[PgLedger]
) -> None:
    start = datetime(2026, 1, 1, 12, 0, 10, tzinfo=UTC)
    clock = Clock(start)
    schedule = Schedule("t.report", every=300)
    before = PeriodicEnqueuer(ledgers[0], [schedule], clock=clock)
    assert (await before.run_once()).enqueued == 1
    # Down for 10 periods; a fresh worker comes up 20 s into the eleventh.
    clock.now = start + timedelta(seconds=10 * 300 + 10)
    after = PeriodicEnqueuer(ledgers[1], [schedule], clock=clock)
    assert (await after.run_once()).enqueued == 1
    assert (await after.run_once()).enqueued == 0  # once
    assert sorted(periods(settings, "t.report")) == [
        "periodic:2026-01-01T12:00:00+00:00",
        "periodic:2026-01-01T12:50:00+00:00",
    ]
    # catch_up="none": a period that began more than late_s ago is skipped.
    clock.now = start + timedelta(seconds=20 * 300 + 100)
    strict = PeriodicEnqueuer(
        ledgers[2], [schedule], PeriodicConfig(catch_up="none", late_s=60), clock=clock
    )
    counts = await strict.run_once()
    assert (counts.enqueued, counts.skipped) == (0, 1)
    clock.now = start + timedelta(seconds=21 * 300)
    assert (await strict.run_once()).enqueued == 1


async def test_a_worker_with_a_periodic_kind_runs_it(settings: Settings) -> None:
    seen: list[str] = []
    registry = Registry()

    @registry.task("t.every", every=1)
    async def every(payload: dict[str, Any], ctx: Any) -> None:
        seen.append(payload["period"])

    async with Pipeline(settings, registry) as pipe:
        deadline = asyncio.get_running_loop().time() + 10
        while len(seen) < 2 and asyncio.get_running_loop().time() < deadline:
            await pipe.relay.run_once()
            await asyncio.sleep(0.1)
    assert len(seen) >= 2 and len(set(seen)) == len(seen)
