"""The plan runners (ledgerq/core/plans.py): one plan, driven sync or async, sees a
step's error where it asked, returns its value, and is closed on the way out
whatever ends it (a BaseException such as a cancellation included)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Generator
from typing import Any

import pytest

from ledgerq.core.plans import adrive, drive


def plan(log: list[str]) -> Generator[object, Any, str]:
    """Asks for three steps; the second fails and is handled in the plan."""
    try:
        first = yield "one"
        log.append(f"one={first}")
        try:
            yield "boom"
        except ValueError as exc:
            log.append(f"caught {exc}")
        third = yield "three"
        return f"done {third}"
    finally:
        log.append("closed")


def answer(step: object) -> object:
    if step == "boom":
        raise ValueError("boom")
    if step == "stop":
        raise KeyboardInterrupt
    return f"<{step}>"


async def aanswer(step: object) -> object:
    await asyncio.sleep(0)
    return answer(step)


def run(do_async: bool, p: Generator[object, Any, str]) -> str:
    if do_async:
        return asyncio.run(adrive(p, aanswer))
    return drive(p, answer)


@pytest.mark.parametrize("do_async", [False, True])
def test_a_plan_sees_its_steps_answers_and_errors_and_returns_its_value(do_async: bool) -> None:
    log: list[str] = []
    assert run(do_async, plan(log)) == "done <three>"
    assert log == ["one=<one>", "caught boom", "closed"]


@pytest.mark.parametrize("do_async", [False, True])
def test_an_error_the_plan_does_not_handle_reaches_the_caller_after_its_finally(
    do_async: bool,
) -> None:
    log: list[str] = []

    def unhandled() -> Generator[object, Any, str]:
        try:
            yield "boom"
            return "never"
        finally:
            log.append("closed")

    with pytest.raises(ValueError, match="boom"):
        run(do_async, unhandled())
    assert log == ["closed"]


def test_a_base_exception_is_not_given_to_the_plan_but_closes_it() -> None:
    log: list[str] = []

    def stopped() -> Generator[object, Any, str]:
        try:
            yield "stop"
        except KeyboardInterrupt:
            log.append("seen")  # never: a BaseException is not thrown into the plan
            raise
        finally:
            log.append("closed")
        return "never"

    do: Callable[[object], object] = answer
    with pytest.raises(KeyboardInterrupt):
        drive(stopped(), do)
    assert log == ["closed"]


async def test_a_cancelled_async_step_closes_the_plan() -> None:
    log: list[str] = []
    started = asyncio.Event()

    def waits() -> Generator[object, Any, str]:
        try:
            yield "wait"
            return "never"
        finally:
            log.append("closed")

    async def hang(step: object) -> object:
        started.set()
        await asyncio.Event().wait()
        return step

    do: Callable[[object], Awaitable[object]] = hang
    task = asyncio.create_task(adrive(waits(), do))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert log == ["closed"]
