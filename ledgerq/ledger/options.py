"""The keyword options the seam's methods take, written once for typing their
``**options`` (``typing.Unpack``): the protocols (:mod:`ledgerq.ledger.protocol`),
their implementations (PostgreSQL, the sharded ledger) and the public wrappers
(:mod:`ledgerq.ledger.operations`) all pass the caller's keywords on unchanged,
so none of them restates the list, and mypy still refuses a misspelt or
mistyped option at every layer.

Each TypedDict only names and types its keywords: the defaults belong to the
one function that consumes them (:func:`~ledgerq.ledger.actions.walk`,
:func:`~ledgerq.ledger.keys.release_plan`, the ``claim_due`` statement's
parameters in :mod:`ledgerq.ledger.pg.services`), and an option left out means
that default.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Required, TypedDict

from ledgerq.ledger.report import Report


class AuditOptions(TypedDict, total=False):
    """Who acts, why, and whether only to count: the keywords of every audited
    operator write (``act`` and ``release_key``). ``actor`` is required; ``reason``
    defaults to None and ``dry_run`` to False."""

    actor: Required[str]
    reason: str | None
    dry_run: bool


class PlanOptions(AuditOptions, total=False):
    """:func:`~ledgerq.ledger.actions.plan`'s keywords from a caller: the audit's and
    ``batch_size`` (tasks per batch; default :data:`~ledgerq.ledger.actions.BATCH_SIZE`)."""

    batch_size: int


class ReportedPlanOptions(PlanOptions, total=False):
    """A plan's keywords (:func:`~ledgerq.ledger.actions.plan`, each server's): the
    caller's, and ``report``, the :class:`Report` it fills (None: a new one), which
    the caller may read at each batch boundary for progress."""

    report: Report | None


#: Called after each committed batch with the report so far.
Progress = Callable[[Report], None]


class BatchedActOptions(PlanOptions, total=False):
    """:meth:`~ledgerq.ledger.protocol.OperationsLedger.act`'s keywords: the plan's,
    and ``progress`` (heard after each batch's commit; None: nobody)."""

    progress: Progress | None


class DueOptions(TypedDict, total=False):
    """:meth:`~ledgerq.ledger.protocol.DirectLedger.claim_due`'s keywords: ``aging_s``
    as the relay's due selection takes it (default
    :data:`~ledgerq.ledger.scheduling.DEFAULT_AGING_S`), and ``kinds`` (default None:
    every kind)."""

    aging_s: float
    kinds: Iterable[str] | None
