"""Act on tasks: :func:`act` and its named forms (:func:`cancel`, :func:`retry`,
:func:`reschedule`, :func:`set_attempts`, :func:`set_priority`), and
:func:`release_key`; each with an async twin. What ``ledgerq tasks ...`` runs.

An action applies to the tasks a :class:`~ledgerq.ledger.filters.TaskFilter`
matches (ids, or filters; a filter with no criterion is refused with
:class:`~ledgerq.core.errors.InvalidFilterError`). It runs in batches of
:data:`~ledgerq.ledger.actions.BATCH_SIZE` tasks, each its own transaction,
each task a compare-and-set on (id, epoch, status), so a task that moved on
meanwhile (a worker claimed it, it finished) is skipped and counted with its
reason, never overwritten. One audit record names the actor, the reason, the
selection and the counts. ``dry_run=True`` counts what would change and
changes nothing (what the CLI shows before it asks). ``progress`` hears the
running :class:`~ledgerq.ledger.actions.Report` after each batch.

The actor defaults to the OS user, as at the CLI. Confirmation is the
caller's business: the CLI asks before more than one task; a script decides.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TypedDict, Unpack

from ledgerq.admin.targets import Target, operator_ledger, os_user, sync_twin
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.keys import KeyRelease

#: Called after each batch with the report so far.
Progress = Callable[[Report], None]


class ActOptions(TypedDict, total=False):
    """The options every named action takes, as :func:`aact` does."""

    actor: str | None
    reason: str | None
    dry_run: bool
    progress: Progress | None


async def aact(
    target: Target,
    action: Action,
    selection: TaskFilter,
    *,
    actor: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> Report:
    """Apply ``action`` to the tasks ``selection`` matches (see the module)."""
    who = actor or os_user()
    async with operator_ledger(target) as ledger:
        if progress is None:
            return await ledger.act(action, selection, actor=who, reason=reason, dry_run=dry_run)
        return await ledger.act(
            action, selection, actor=who, reason=reason, dry_run=dry_run, progress=progress
        )


act = sync_twin(aact)


async def acancel(
    target: Target, selection: TaskFilter, *, cascade: bool = False, **options: Unpack[ActOptions]
) -> Report:
    """Cancel: a waiting task never runs; a running one is asked to stop
    (``ctx.cancel_requested``); ``cascade`` cancels live descendants too.
    ``options``: ``actor``, ``reason``, ``dry_run``, ``progress`` of :func:`aact`."""
    return await aact(target, Action.cancel(cascade=cascade), selection, **options)


cancel = sync_twin(acancel)


async def aretry(target: Target, selection: TaskFilter, **options: Unpack[ActOptions]) -> Report:
    """Run dead or cancelled tasks again (same id, fresh attempts); a pending task
    scheduled later runs now."""
    return await aact(target, Action.retry(), selection, **options)


retry = sync_twin(aretry)


async def areschedule(
    target: Target, selection: TaskFilter, when: datetime, **options: Unpack[ActOptions]
) -> Report:
    """Move pending tasks' due time to ``when`` (timezone-aware)."""
    return await aact(target, Action.reschedule(when), selection, **options)


reschedule = sync_twin(areschedule)


async def aset_attempts(
    target: Target, selection: TaskFilter, max_attempts: int, **options: Unpack[ActOptions]
) -> Report:
    """Change live tasks' attempt limit."""
    return await aact(target, Action.set_attempts(max_attempts), selection, **options)


set_attempts = sync_twin(aset_attempts)


async def aset_priority(
    target: Target, selection: TaskFilter, priority: int, **options: Unpack[ActOptions]
) -> Report:
    """Change live tasks' priority (0-9)."""
    return await aact(target, Action.set_priority(priority), selection, **options)


set_priority = sync_twin(aset_priority)


async def arelease_key(
    target: Target,
    key: str,
    *,
    actor: str | None = None,
    reason: str | None = None,
    dry_run: bool = False,
) -> KeyRelease:
    """Let ordering ``key`` move on past the dead tasks of an ``ordering="block"``
    kind that hold it: they stay dead and stop holding it (audited)."""
    async with operator_ledger(target) as ledger:
        return await ledger.release_key(
            key, actor=actor or os_user(), reason=reason, dry_run=dry_run
        )


release_key = sync_twin(arelease_key)
