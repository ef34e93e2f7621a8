"""Plans: a piece of logic written once as a generator, run by a sync or an async
runner.

A plan yields steps and is sent each step's answer; a step that fails has its
exception raised in the plan at the ``yield`` that asked for it, so the plan's
``try``/``except``/``finally`` blocks behave as they would in straight-line code.
The runner's ``do(step)`` is the only place that knows whether the I/O is sync
or async. On the way out, for whatever reason (a ``BaseException`` such as a
task's cancellation included), the plan is closed, so its ``finally`` blocks run
before the runner returns or raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

T = TypeVar("T")


def drive(plan: Generator[Any, Any, T], do: Callable[[object], Any]) -> T:
    """Run ``plan``'s steps with ``do``; a step's error is raised in the plan where it
    asked for it (so its ``try`` blocks see it as in straight-line code). Closing the
    plan on the way out runs its ``finally`` blocks even on a BaseException."""
    answer: Any = None
    failed: Exception | None = None
    try:
        while True:
            try:
                step = plan.send(answer) if failed is None else plan.throw(failed)
            except StopIteration as stop:
                result: T = stop.value
                return result
            try:
                answer, failed = do(step), None
            except Exception as exc:
                answer, failed = None, exc
    finally:
        plan.close()


async def adrive(plan: Generator[Any, Any, T], do: Callable[[object], Awaitable[Any]]) -> T:
    """:func:`drive` with an async ``do``."""
    answer: Any = None
    failed: Exception | None = None
    try:
        while True:
            try:
                step = plan.send(answer) if failed is None else plan.throw(failed)
            except StopIteration as stop:
                result: T = stop.value
                return result
            try:
                answer, failed = await do(step), None
            except Exception as exc:
                answer, failed = None, exc
    finally:
        plan.close()
