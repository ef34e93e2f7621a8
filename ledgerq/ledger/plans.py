"""Running an operator's plan (:mod:`ledgerq.ledger.actions`, :mod:`ledgerq.ledger.keys`):
a generator of statements, driven on the caller's executor by :func:`drive` or
:func:`adrive`. A ``None`` step is a batch boundary: the sync driver leaves it to
the caller's transaction, the async one may commit there. Used by the seam's
implementations (:mod:`ledgerq.ledger.pg.tx`, :mod:`ledgerq.ledger.pg.operations`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

from ledgerq.ledger.actions import Step
from ledgerq.ledger.executors import AsyncRunner, Rows, Runner
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter

#: What a plan returns: an action's :class:`Report`, a :class:`KeyRelease`.
R = TypeVar("R")


def drive(steps: Generator[Step | None, Rows, R], run: Runner) -> R:
    """Run a plan's statements with ``run``; batch boundaries are the caller's business."""
    try:
        step = next(steps)
        while True:
            step = steps.send([] if step is None else run(*step))
    except StopIteration as stop:
        report: R = stop.value
        return report


async def adrive(
    steps: Generator[Step | None, Rows, R],
    run: AsyncRunner,
    commit: Callable[[], Awaitable[None]] | None = None,
) -> R:
    """:func:`drive` with an async runner; ``commit`` (if any) is awaited at each batch
    boundary."""
    try:
        step = next(steps)
        while True:
            if step is None:
                if commit is not None:
                    await commit()
                step = steps.send([])
            else:
                step = steps.send(await run(*step))
    except StopIteration as stop:
        report: R = stop.value
        return report


def list_params(selection: TaskFilter) -> dict[str, Any]:
    """``list_tasks``'s parameters (its limit, else 50)."""
    return selection.params(selection.limit or DEFAULT_LIMIT)
