"""Fan-out on the MySQL / MariaDB ledger (``parent_id``, ``ctx.spawn``,
``@task(on_children_done=...)``, migration m0007), with PostgreSQL's semantics
(migration 0010): a child's parent must exist, live or in history
(:class:`~ledgerq.core.errors.UnknownParentError`), and its family must not have
completed (:class:`~ledgerq.core.errors.FamilyCompletedError`), both refused
before anything is written; when the parent and every child are terminal, the
family completes once, in the transaction that ends the last of them, and a
parent whose kind has ``on_children_done`` gets one callback task with the
children's counts by outcome.

PostgreSQL keeps families by triggers. Here the plans do, in the same
transactions: :func:`open_families` before a producer inserts children (the
producer's ``enqueue``, ``ctx.spawn`` in the attempt's transaction), and
:func:`after_ended` after every plan that ends tasks (the finish, the
reconciler's, an operator's cancel), which first judges the ended tasks'
dependents (:func:`.dependencies.released_by`) and then checks the families of
everything that ended, the dependents it cancelled included.

Locks: a family's row is the one lock its completion check takes (``FOR
UPDATE``, families in parent-id order), so the last children ending at once on
two workers serialise: the second waits for the first's commit, then (READ
COMMITTED, ledgerq's own transactions: a snapshot per statement) sees the
first's child ended. The producer, before it inserts a child, inserts the
family row or meets it (a duplicate key, whose check keeps a shared lock on the
row): either way it holds the row until it commits, so a completion check waits
for the new child's commit and counts it. PostgreSQL's insert takes no lock
there; on MySQL a child added by a producer while its family completes is
therefore never left out, the producer's transaction making the completion
wait. An ender takes no lock a producer holds but the family row, and a
producer waits on no lock an ender takes before it. As on PostgreSQL, a
completion checked in an application's own REPEATABLE READ transaction (its
snapshot older than another child's end) may not see that end: that family
completes at its next end, or stays open.

Not built: a child enqueued with ``after=`` a task that already failed is
cancelled at once by the producer's procedure (:mod:`.dependencies`), which
does not check its family: the family of a parent that ended before that child,
its first, was added stays open (any other family has a live task whose end
checks it later).
"""

from __future__ import annotations

from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import TextClause

from ledgerq.core.errors import FamilyCompletedError, UnknownParentError
from ledgerq.ledger.mysql import dependencies
from ledgerq.ledger.mysql.answer import Answer
from ledgerq.ledger.mysql.base import error_number
from ledgerq.ledger.sql import load_in_lists

R = TypeVar("R")
Plan = Generator[tuple[TextClause, Mapping[str, Any]], Answer, R]
#: ER_DUP_ENTRY: the family row exists already.
_DUPLICATE_KEY = 1062


@dataclass(frozen=True)
class FamilyQueries:
    """``ledger/mysql/families.sql``."""

    parents_known: TextClause
    open_family: TextClause
    completed_families: TextClause
    families_touched: TextClause
    ended_near: TextClause
    lock_families: TextClause
    families_done: TextClause
    insert_callback: TextClause
    complete_family: TextClause
    family_row: TextClause
    children_done_kinds: TextClause
    set_children_done: TextClause
    truncate_families: TextClause


FQ: FamilyQueries = load_in_lists(
    FamilyQueries, "ledgerq.ledger.mysql", "families.sql", dependencies.ENDS
)


def open_families(parents: Iterable[int | None]) -> Plan[None]:
    """Before children of ``parents`` are inserted: refuse an unknown parent or a
    completed family, then create or lock each family row, in parent-id order."""
    wanted = sorted({p for p in parents if p is not None})
    if not wanted:
        return
    known = yield FQ.parents_known, {"ids": wanted}
    found = {int(r[0]) for r in known.rows}
    unknown = [p for p in wanted if p not in found]
    if unknown:
        raise UnknownParentError(f"unknown parent task {unknown[0]}")
    for parent_id in wanted:
        try:
            yield FQ.open_family, {"parent_id": parent_id}
        except Exception as exc:
            if error_number(getattr(exc, "orig", None) or exc) != _DUPLICATE_KEY:
                raise
    completed = yield FQ.completed_families, {"ids": wanted}
    if completed.rows:
        raise FamilyCompletedError(f"the family of task {int(completed.rows[0][0])} has completed")


def completed(families: Iterable[int]) -> Plan[list[tuple[int, int | None]]]:
    """The open ``families`` touched by tasks that just ended, in the same
    transaction: those none of whose tasks is live any more complete. Each family
    completed, with its callback's id (None: its parent's kind has none)."""
    wanted = sorted(set(families))
    if not wanted:
        return []
    locked = yield FQ.lock_families, {"ids": wanted}
    held = sorted(int(r[0]) for r in locked.rows)
    if not held:
        return []
    done = yield FQ.families_done, {"ids": held}
    completed: list[tuple[int, int | None]] = []
    for parent_id, queue, priority, shard, callback in done.rows:
        callback_id = None
        if callback is not None:
            params = {"parent_id": int(parent_id), "callback": callback, "queue": queue}
            inserted = yield FQ.insert_callback, {**params, "priority": priority, "shard": shard}
            callback_id = inserted.last_id
        yield FQ.complete_family, {"parent_id": int(parent_id), "callback_id": callback_id}
        completed.append((int(parent_id), callback_id))
    return completed


def after_ended(ended: Mapping[int, str]) -> Plan[None]:
    """What every plan that ends tasks (``ended``: id: status in history) runs next,
    in its transaction: their waiting dependents judged, then the families of all
    that ended. One statement (``ended_near``) when none of them has a dependent,
    an edge or a family."""
    if not ended:
        return
    near = yield FQ.ended_near, {"ids": sorted(ended)}
    edges = [r for r in near.rows if r[0] == "edge"]
    touched = {int(r[1]) for r in near.rows if r[0] == "family"}
    moved: list[tuple[int, str]] = []
    if edges:
        moved = yield from dependencies.released_by(ended, edges)
    cancelled = sorted(task_id for task_id, outcome in moved if outcome == "cancelled")
    if cancelled:
        more = yield FQ.families_touched, {"ids": cancelled}
        touched.update(int(r[1]) for r in more.rows)
    yield from completed(touched)


def release_stuck(limit: int) -> Plan[list[tuple[int, str]]]:
    """The reconciler's safety net (:func:`.dependencies.release_stuck`), then what
    the tasks it cancelled end in turn (:func:`after_ended`)."""
    moved = yield from dependencies.release_stuck(limit)
    yield from after_ended({i: "cancelled" for i, outcome in moved if outcome == "cancelled"})
    return moved
