"""Bound parameters for the batch statements: parallel arrays, in id order.

Rows are locked in id order, so two batches that touch the same rows cannot
deadlock each other. The sorted arrays give that order only to a plan that walks
them (a nested loop into the primary key: the worker's and the direct claim's
planner settings, ``ledger/pg/engines.py``); the statements of other connections
(an operator's action, the relay's return of unpublished rows) lock their rows
in id order explicitly first (``fence`` in ``fragments.sql``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ledgerq.ledger.model import Fence, Outcome


def fence_params(fences: Iterable[Fence]) -> dict[str, list[int]]:
    ordered = sorted(fences)
    return {"ids": [f[0] for f in ordered], "epochs": [f[1] for f in ordered]}


def outcome_params(outcomes: Sequence[Outcome]) -> dict[str, list[Any]]:
    ordered = sorted(outcomes, key=lambda o: o.id)
    return {
        "ids": [o.id for o in ordered],
        "epochs": [o.epoch for o in ordered],
        "verdicts": [o.verdict for o in ordered],
        "delays": [float(o.delay) for o in ordered],
        "errors": [o.error for o in ordered],
        "results": [o.result for o in ordered],
    }
