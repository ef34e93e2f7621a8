"""Plans: a piece of logic written once as a generator, run by a sync or an async
runner.

A plan yields steps and is sent each step's answer; a step that fails has its
exception raised in the plan at the ``yield`` that asked for it, so the plan's
``try``/``except``/``finally`` blocks behave as they would in straight-line code.
The runner's ``do(step)`` is the only place that knows whether the I/O is sync
or async: :func:`drive` and :func:`adrive` differ only in how they call it, and
share the rest (:class:`_Run`, how a step's outcome is handed back). On the way
out, for whatever reason (a ``BaseException`` such as a task's cancellation
included), the plan is closed, so its ``finally`` blocks run before the runner
returns or raises.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from contextlib import closing
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class _Outcome:
    """What a step came to: its answer, or the ``Exception`` it raised."""

    answer: Any = None
    error: Exception | None = None


class _Run(Generic[T]):
    """One plan on its way: each step's outcome in, the next step (or the result) out."""

    def __init__(self, plan: Generator[Any, Any, T]) -> None:
        self._plan = plan
        self.step: object = None
        self.result: T

    def advance(self, outcome: _Outcome) -> bool:
        """Hand the plan its last step's outcome (an error is raised in it where it
        asked); True with the next step in :attr:`step`, or False with the plan's
        value in :attr:`result`."""
        try:
            if outcome.error is None:
                self.step = self._plan.send(outcome.answer)
            else:
                self.step = self._plan.throw(outcome.error)
        except StopIteration as stop:
            self.result = stop.value
            return False
        return True


def _call(do: Callable[[object], Any], step: object) -> _Outcome:
    try:
        return _Outcome(do(step))
    except Exception as exc:
        return _Outcome(error=exc)


async def _acall(do: Callable[[object], Awaitable[Any]], step: object) -> _Outcome:
    try:
        return _Outcome(await do(step))
    except Exception as exc:
        return _Outcome(error=exc)


def drive(plan: Generator[Any, Any, T], do: Callable[[object], Any]) -> T:
    """Run ``plan``'s steps with ``do``; a step's error is raised in the plan where it
    asked for it (so its ``try`` blocks see it as in straight-line code). Closing the
    plan on the way out runs its ``finally`` blocks even on a BaseException."""
    run = _Run(plan)
    with closing(plan):
        outcome = _Outcome()
        while run.advance(outcome):
            outcome = _call(do, run.step)
        return run.result


async def adrive(plan: Generator[Any, Any, T], do: Callable[[object], Awaitable[Any]]) -> T:
    """:func:`drive` with an async ``do``."""
    run = _Run(plan)
    with closing(plan):
        outcome = _Outcome()
        while run.advance(outcome):
            outcome = await _acall(do, run.step)
        return run.result
