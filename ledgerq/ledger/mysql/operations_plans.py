"""The operator's actions on the MySQL ledger as plans (:mod:`.plans`' I/O-free
generators): ``list_tasks`` and ``act`` (cancel, retry, reschedule, set-attempts,
set-priority), run by :class:`~ledgerq.ledger.mysql.operations.MyOperations` on
the ledger's own connection (a commit at each batch boundary) and by
:class:`~ledgerq.ledger.mysql.tx.MyTx` in the caller's transaction (no commit).

What an action does is PostgreSQL's (:mod:`ledgerq.ledger.actions`): the same
:class:`~ledgerq.ledger.actions.Action` routes each listed task (by its status)
to a statement or a skip reason, the same :class:`~ledgerq.ledger.actions.Report`
counts, the same audit record. Only the statements differ (``operations.sql``):
PostgreSQL's one-statement compare-and-set is here a locking read of the
batch's rows still at their listed epoch and in the expected status, then the
write of the ids it returned (:data:`ROUTES`), fence repeated. A task the lock
did not return moved on meanwhile (claimed, finished, changed by someone else)
and is skipped as :data:`~ledgerq.ledger.actions.MOVED_ON`, never overwritten.
The audit record is written through ``audit.sql``'s statements
(:mod:`ledgerq.ledger.mysql.audit`) in the batch's transaction: a batch's
changes and its audit lines commit together or not at all.

Races: a task listed as pending and claimed before the lock is skipped; a task
a worker is finishing makes the lock wait for that finish, then it is skipped.
Paging is by id, newest first, so a task this action moved (a retried one
changes tables) is never met twice. Rows are locked in id order: no deadlock
between two actions; InnoDB's deadlock against another statement rolls the
batch back (transient: run the action again, it is idempotent).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Unpack

from sqlalchemy import TextClause

from ledgerq.ledger.actions import (
    LIST_COLUMNS,
    Action,
    Report,
    Statements,
    outcome_counts,
    task_row,
    walk,
)
from ledgerq.ledger.filters import STATUSES, TaskFilter
from ledgerq.ledger.mysql import families
from ledgerq.ledger.mysql.audit import AQ
from ledgerq.ledger.mysql.base import aware, decoded
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.mysql.plans import Answer
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.mysql.rows import BOOLEAN_COLUMNS, JSON_COLUMNS
from ledgerq.ledger.options import ReportedPlanOptions
from ledgerq.ledger.sql import OQ, load_in_lists, read_library


@dataclass(frozen=True)
class OperationsQueries:
    """``ledger/mysql/operations.sql``."""

    list_tasks: TextClause
    lock_queued: TextClause
    bury_cancelled: TextClause
    delete_cancelled: TextClause
    lock_running: TextClause
    request_cancel: TextClause
    lock_ended: TextClause
    revive: TextClause
    drop_revived: TextClause
    lock_unstarted: TextClause
    reschedule: TextClause
    lock_live: TextClause
    set_max_attempts: TextClause
    set_priority: TextClause
    live_descendants: TextClause
    family: TextClause
    list_audit: TextClause
    task_audit: TextClause
    truncate_audit: TextClause


_LIBRARY = {**LIBRARY, **read_library("ledgerq.ledger.mysql", "operations_fragments.sql")}
OPQ: OperationsQueries = load_in_lists(
    OperationsQueries, "ledgerq.ledger.mysql", "operations.sql", _LIBRARY
)

#: What PostgreSQL's statement an :class:`Action` routes a task to stands for here:
#: the locking read that decides the compare-and-set, then its writes.
ROUTES: dict[int, tuple[TextClause, tuple[TextClause, ...]]] = {
    id(OQ.cancel_queued): (OPQ.lock_queued, (OPQ.bury_cancelled, OPQ.delete_cancelled)),
    id(OQ.request_cancel): (OPQ.lock_running, (OPQ.request_cancel,)),
    id(OQ.retry_history): (OPQ.lock_ended, (OPQ.revive, OPQ.drop_revived)),
    id(OQ.reschedule): (OPQ.lock_unstarted, (OPQ.reschedule,)),
    id(OQ.set_max_attempts): (OPQ.lock_live, (OPQ.set_max_attempts,)),
    id(OQ.set_priority): (OPQ.lock_live, (OPQ.set_priority,)),
}

Step = tuple[TextClause, Mapping[str, Any]]
#: A plan that also yields None at each batch boundary (commit there, or not).
BatchedPlan = Generator[Step | None, Answer, Report]


def list_params(selection: TaskFilter, limit: int, before: int | None = None) -> dict[str, Any]:
    """``list_tasks``' parameters: the filter's (:meth:`TaskFilter.params`) as MySQL
    binds them (times naive UTC, the ids an IN list with a flag for "any", the tags
    one JSON array)."""
    params = selection.params(limit, before)
    ids, tags = params["ids"], params["tags"]
    params.update(
        statuses=params["statuses"] or list(STATUSES),
        since=utc(params["since"]),
        until=utc(params["until"]),
        every_id=ids is None,
        ids=ids or [0],
        tags=None if tags is None else json.dumps(tags),
    )
    return params


def listed(rows: Sequence[Sequence[Any]]) -> list[dict[str, Any]]:
    """``list_tasks``' rows as PostgreSQL's listing gives them (JSON decoded,
    booleans as bool, times aware then ISO text)."""
    out = []
    for row in rows:
        values = []
        for name, value in zip(LIST_COLUMNS, row, strict=True):
            if name in JSON_COLUMNS:
                value = decoded(value)
            elif name in BOOLEAN_COLUMNS:
                value = bool(value)
            elif isinstance(value, datetime):
                value = aware(value)
            values.append(value)
        out.append(task_row(values))
    return out


def list_tasks(selection: TaskFilter, limit: int) -> Generator[Step, Answer, list[dict[str, Any]]]:
    answer = yield OPQ.list_tasks, list_params(selection, limit)
    return listed(answer.rows)


def _batch_json(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    ordered = sorted(rows, key=lambda r: int(r["id"]))  # locked in id order: no deadlocks
    batch = {str(r["id"]): {"epoch": int(r["epoch"])} for r in ordered}
    return {"ids": [int(r["id"]) for r in ordered], "batch": json.dumps(batch)}


def compare_and_set(
    route: tuple[TextClause, tuple[TextClause, ...]],
    rows: Sequence[Mapping[str, Any]],
    params: Mapping[str, Any],
) -> Generator[Step, Answer, set[int]]:
    """Lock ``rows`` still at their epochs and in the route's statuses, write the won
    ones (fence repeated); the ids won."""
    lock, writes = route
    locked = yield lock, _batch_json(rows)
    won = {int(r[0]) for r in locked.rows}
    if won:
        fence = _batch_json([r for r in rows if int(r["id"]) in won])
        for write in writes:
            yield write, {**params, **fence}
    return won


def _ended(statement: TextClause, won: set[int]) -> Generator[Step, Answer, None]:
    """What the tasks a cancel just ended end in turn, in the same transaction:
    their waiting dependents, their families (:func:`.families.after_ended`)."""
    if statement is OQ.cancel_queued and won:
        yield from families.after_ended(dict.fromkeys(sorted(won), "cancelled"))


def _insert_audit(audit: dict[str, Any]) -> Generator[Step, Answer, int | None]:
    inserted = yield AQ.insert_audit, audit
    return inserted.last_id


def _list_page(
    selection: TaskFilter, want: int, before: int | None
) -> Generator[Step, Answer, list[dict[str, Any]]]:
    answer = yield OPQ.list_tasks, list_params(selection, want, before)
    return listed(answer.rows)


def _change(
    statement: TextClause, params: dict[str, Any], rows: list[dict[str, Any]]
) -> Generator[Step, Answer, set[int]]:
    """PostgreSQL's ``statement`` as its route here (:data:`ROUTES`), reschedule's time
    as MySQL binds it; then what the tasks a cancel ended end in turn."""
    params = {k: utc(v) if isinstance(v, datetime) else v for k, v in params.items()}
    won = yield from compare_and_set(ROUTES[id(statement)], rows, params)
    yield from _ended(statement, won)
    return won


def _descendants(ids: list[int]) -> Generator[Step, Answer, Sequence[Sequence[Any]]]:
    answer = yield OPQ.live_descendants, {"ids": ids}
    return answer.rows


def _record(audit_id: int | None, outcome: dict[int, str]) -> Generator[Step, Answer, None]:
    """One batch's counts and each task's outcome, into audit record ``audit_id``."""
    yield AQ.count_audit_batch, {"audit_id": audit_id, **outcome_counts(outcome)}
    if outcome:
        rows = json.dumps([[task_id, text] for task_id, text in sorted(outcome.items())])
        yield AQ.record_audit_tasks, {"audit_id": audit_id, "rows": rows}


#: MySQL's steps of an action (``operations.sql``, ``audit.sql``).
MY_STATEMENTS: Statements[Step, Answer] = Statements(
    _insert_audit, _list_page, _change, _descendants, _record
)


def act(
    action: Action, selection: TaskFilter, **options: Unpack[ReportedPlanOptions]
) -> BatchedPlan:
    """The statements of ``action`` over ``selection`` (PostgreSQL's walk,
    :func:`ledgerq.ledger.actions.walk`, with :data:`MY_STATEMENTS`); returns the
    :class:`Report`."""
    return (yield from walk(action, selection, MY_STATEMENTS, **options))
