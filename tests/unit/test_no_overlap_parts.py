"""A timed-out sync handler's outcome waits for its thread, under a hard cap
(consumers/hung.py): the dispatcher and runner alone, no services."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ledgerq.consumers.claimer import Slots
from ledgerq.consumers.context import TaskContext
from ledgerq.consumers.handoff import Claimed, Ended, StillRunning
from ledgerq.consumers.hung import HungThreads
from ledgerq.consumers.registry import Registry
from ledgerq.ledger.model import Outcome
from tests.unit.test_worker_parts import claimed_task, dispatcher_for


@pytest.fixture
def pool() -> Iterator[ThreadPoolExecutor]:
    executor = ThreadPoolExecutor(2)
    yield executor
    executor.shutdown(wait=True)


def _sleeper(release: threading.Event) -> Registry:
    registry = Registry()

    @registry.task("parts.overrun", timeout=0.1)
    def overrun(payload: Any, ctx: TaskContext) -> None:
        release.wait(10)  # ignores ctx.lost

    return registry


async def _until(condition: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


async def test_a_timed_out_sync_handlers_outcome_waits_for_its_thread(
    pool: ThreadPoolExecutor,
) -> None:
    release, slots, out, hung = threading.Event(), Slots(2), list[Ended](), list[str]()
    dispatcher, leases = dispatcher_for(_sleeper(release), pool, slots, out)
    dispatcher.runner.hung = HungThreads(30.0, on_hung=hung.append)
    slots.take(1)
    dispatcher.start([Claimed(claimed_task(1, 1, "parts.overrun"), None)])

    await _until(lambda: dispatcher.runner.hung.running == 1)  # timed out, thread runs
    await asyncio.sleep(0.2)
    assert out == [] and len(leases) == 1 and slots.free == 1  # lease and slot kept
    release.set()
    await _until(lambda: out)
    [ended] = out
    assert isinstance(ended.result, Outcome) and ended.result.verdict == "retry"
    assert ended.result.error is not None and "timed out after 0.1 s" in ended.result.error
    assert slots.free == 2 and hung == [] and dispatcher.runner.hung.running == 0


async def test_a_thread_past_the_hang_limit_calls_the_crash_once(
    pool: ThreadPoolExecutor,
) -> None:
    release, slots, out, hung = threading.Event(), Slots(2), list[Ended](), list[str]()
    dispatcher, _ = dispatcher_for(_sleeper(release), pool, slots, out)
    dispatcher.runner.hung = HungThreads(0.2, on_hung=hung.append)
    slots.take(1)
    dispatcher.start([Claimed(claimed_task(7, 3, "parts.overrun"), None)])
    try:
        await _until(lambda: hung)
        assert out == []  # nothing written: the process would be gone
        [line] = hung
        assert "task 7 (parts.overrun)" in line and "0.2 s past its timeout" in line
    finally:
        release.set()
    await _until(lambda: out)
    assert len(hung) == 1


async def test_a_sync_handler_still_running_after_the_grace_ends_still_running(
    pool: ThreadPoolExecutor,
) -> None:
    release, slots, out = threading.Event(), Slots(2), list[Ended]()
    running = threading.Event()
    registry = Registry()

    @registry.task("parts.slow")
    def slow(payload: Any, ctx: TaskContext) -> None:
        running.set()
        release.wait(10)

    dispatcher, _ = dispatcher_for(registry, pool, slots, out)
    slots.take(1)
    dispatcher.start([Claimed(claimed_task(1, 1, "parts.slow"), None)])
    await _until(running.is_set)  # its thread runs the handler
    try:
        await dispatcher.drain(0.05)
        assert [e.result for e in out] == [StillRunning()]  # no retry written
    finally:
        release.set()
    await _until(lambda: slots.free == 2)  # the slot comes back with the thread
