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
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.actions import (
    BATCH_SIZE,
    CASCADED,
    LIST_COLUMNS,
    MOVED_ON,
    NOT_FOUND,
    QUEUED,
    Action,
    Report,
    start_report,
    task_row,
)
from ledgerq.ledger.filters import STATUSES, TaskFilter
from ledgerq.ledger.mysql import families
from ledgerq.ledger.mysql.audit import AQ
from ledgerq.ledger.mysql.base import aware, decoded
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.mysql.plans import Answer
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.mysql.rows import BOOLEAN_COLUMNS, JSON_COLUMNS
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


def _routed(action: Action, row: Mapping[str, Any], now: datetime) -> Any:
    """The route (or skip reason) of ``row``, with reschedule's time as MySQL binds it."""
    return action.route(row["status"], datetime.fromisoformat(row["run_at"]), now)


def _batch(
    action: Action, page: list[dict[str, Any]], report: Report, now: datetime
) -> Generator[Step, Answer, dict[int, str]]:
    """One page: route, compare-and-set, count; each task's outcome."""
    outcome: dict[int, str] = {}
    routes: dict[int, tuple[TextClause, dict[str, Any], list[dict[str, Any]]]] = {}
    for row in page:
        routed = _routed(action, row, now)
        if isinstance(routed, str):
            outcome[row["id"]] = routed
            report.skip(routed)
            continue
        statement, params = routed
        params = {k: utc(v) if isinstance(v, datetime) else v for k, v in params.items()}
        routes.setdefault(id(statement), (statement, params, []))[2].append(row)
    for statement, params, rows in routes.values():
        if report.dry_run:
            won = {r["id"] for r in rows}
        else:
            won = yield from compare_and_set(ROUTES[id(statement)], rows, params)
            yield from _ended(statement, won)
        for row in rows:
            outcome[row["id"]] = "changed" if row["id"] in won else MOVED_ON
        report.changed += len(won)
        if statement is OQ.request_cancel:
            report.asked_to_stop += len(won)
        if len(rows) > len(won):
            report.skip(MOVED_ON, len(rows) - len(won))
    if action.cascade:
        below = yield from _cascade([r["id"] for r in page], report)
        outcome.update({k: v for k, v in below.items() if k not in outcome})
    return outcome


def _cascade(ids: list[int], report: Report) -> Generator[Step, Answer, dict[int, str]]:
    """Cancel the live descendants of ``ids``; each one's outcome."""
    outcome: dict[int, str] = {}
    answer = yield OPQ.live_descendants, {"ids": sorted(ids)}
    found: list[dict[str, Any]] = [
        {"id": int(r[0]), "epoch": int(r[1]), "status": str(r[2])} for r in answer.rows
    ]
    for statement in (OQ.cancel_queued, OQ.request_cancel):
        group = [r for r in found if (r["status"] in QUEUED) == (statement is OQ.cancel_queued)]
        if not group:
            continue
        if report.dry_run:
            won = {r["id"] for r in group}
        else:
            won = yield from compare_and_set(ROUTES[id(statement)], group, {})
            yield from _ended(statement, won)
        for row in group:
            outcome[row["id"]] = CASCADED if row["id"] in won else MOVED_ON
        report.cascaded += len(won)
        if statement is OQ.request_cancel:
            report.asked_to_stop += len(won)
    return outcome


def _record(audit_id: int | None, outcome: dict[int, str]) -> Generator[Step, Answer, None]:
    """One batch's counts and each task's outcome, into audit record ``audit_id``."""
    changed = sum(1 for o in outcome.values() if o in ("changed", CASCADED))
    counts = {"matched": len(outcome), "changed": changed, "skipped": len(outcome) - changed}
    yield AQ.count_audit_batch, {"audit_id": audit_id, **counts}
    if outcome:
        rows = json.dumps([[task_id, text] for task_id, text in sorted(outcome.items())])
        yield AQ.record_audit_tasks, {"audit_id": audit_id, "rows": rows}


def act(
    action: Action,
    selection: TaskFilter,
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    report: Report | None = None,
) -> BatchedPlan:
    """The statements of ``action`` over ``selection`` (PostgreSQL's
    :func:`ledgerq.ledger.actions.plan`, step for step); returns the :class:`Report`."""
    report, audit = start_report(action, selection, actor, reason, dry_run, report)
    if audit is not None:
        inserted = yield AQ.insert_audit, audit
        report.audit_id = inserted.last_id
    seen: set[int] = set()
    before: int | None = None
    while selection.limit is None or report.matched < selection.limit:
        want = batch_size if selection.limit is None else selection.limit - report.matched
        want = min(want, batch_size)
        answer = yield OPQ.list_tasks, list_params(selection, want, before)
        page = listed(answer.rows)
        if not page:
            break
        before = page[-1]["id"]
        seen.update(r["id"] for r in page)
        report.matched += len(page)
        outcome = yield from _batch(action, page, report, datetime.now(UTC))
        if not dry_run:
            yield from _record(report.audit_id, outcome)
        yield None
        if len(page) < want:
            break
    missing = sorted(set(selection.ids) - seen) if selection.before is None else []
    if missing:
        report.matched += len(missing)
        report.skip(NOT_FOUND, len(missing))
        if not dry_run:
            yield from _record(report.audit_id, dict.fromkeys(missing, NOT_FOUND))
            yield None
    return report
