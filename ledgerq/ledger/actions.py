"""Operator actions as a plan of statements: cancel, retry, reschedule,
set-attempts, set-priority over the tasks a :class:`~.filters.TaskFilter` selects.

An action is written once, without I/O, as a generator (:func:`plan`) that
yields each statement it needs (``operations.sql``) and is sent the rows back,
and yields :data:`COMMIT` at the end of each batch. Whoever runs it decides
what a batch boundary means: :class:`~ledgerq.ledger.pg.operations.PgOperations`
commits there (one transaction per batch of ``batch_size`` tasks, never one
giant transaction), the caller-transaction API (:mod:`.operations`) ignores it
(the caller commits). The walk (:func:`walk`: paging, routing, counting, the
audit) is every server's; what each step writes is a server's
:class:`Statements` (PostgreSQL's :data:`PG_STATEMENTS`, MySQL's in
:mod:`ledgerq.ledger.mysql.operations_plans`).

Per batch: one page of matches (newest first, keyset by id), sorted into the
statement each status calls for, or a skip reason (retrying a succeeded task
makes no sense); each statement is a compare-and-set on (id, epoch, status) and
returns the ids it won; a matched task it did not win moved on meanwhile (it
finished, started, was cancelled by someone else) and is skipped, never
overwritten. Then, unless it is a dry run, the batch's counts and each task's
outcome go into the action's audit row, in the same transaction. A dry run
writes nothing and reports what the statements would be asked to change.

``Action.cancel(cascade=True)`` also cancels, batch by batch, the live
descendants of every matched task (``live_descendants``: its children, their
children, ..., through finished ones too), with the same two statements; each
is recorded in the audit row and counted in ``Report.cascaded``. A descendant
that ends meanwhile is skipped as "moved on"; one spawned after the walk is not
cancelled (its parent's attempt committed after the cancel was decided).

Races: a task listed as pending may be claimed before its CAS runs: it is
skipped as "moved on". Paging is by id, so tasks changed by this action (a
retried one moves tables) are never met twice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack

from sqlalchemy import TextClause

from ledgerq.core.errors import InvalidFilterError
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.report import Report as Report  # (re-exported: its importers read it here)
from ledgerq.ledger.sql import OQ
from ledgerq.ledger.validation import check_max_attempts, check_priority

if TYPE_CHECKING:
    from ledgerq.ledger.options import ReportedPlanOptions

#: Columns of a ``list_tasks`` row, in order.
LIST_COLUMNS = (
    "id", "kind", "queue", "status", "attempts", "max_attempts", "business_key", "run_at",
    "created_at", "finished_at", "last_error", "priority", "epoch", "result", "progress",
    "expires_at", "expired", "tags", "location",
)  # fmt: skip
ACTIONS = ("cancel", "retry", "reschedule", "set-attempts", "set-priority")
BATCH_SIZE = 500
QUEUED = ("waiting", "pending", "published")
LIVE = ("waiting", "pending", "published", "running")
MOVED_ON = "moved on meanwhile (finished, started or changed by someone else)"
NOT_FOUND = "no such task"

Step = tuple[TextClause, dict[str, Any]]
Rows = Sequence[Sequence[Any]]
#: What a plan yields at the end of each batch: commit here (or not, in the caller's).
COMMIT = None
Plan = Generator[Step | None, Rows, "Report"]


def jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def status_text(row: Mapping[str, Any]) -> str:
    """A task's status as people read it: ``cancelled (expired)`` for a task that
    expired before it started."""
    return f"{row['status']} (expired)" if row.get("expired") else str(row["status"])


def attempts_text(row: Mapping[str, Any]) -> str:
    """``attempts/max_attempts``; ``-`` for a max_attempts left to the kind's
    default (filled in by the task's first claim)."""
    limit = row.get("max_attempts")
    return f"{row['attempts']}/{'-' if limit is None else limit}"


def progress_text(progress: Any) -> str:
    """A stored progress report as one short line: ``40/100 (40%) copying``, or ''."""
    if not isinstance(progress, dict) or progress.get("done") is None:
        return ""
    done, total = progress["done"], progress.get("total")
    text = f"{done:g}" if isinstance(done, int | float) else str(done)
    if isinstance(total, int | float) and total:
        text += f"/{total:g} ({100 * done / total:.0f}%)"
    if progress.get("message"):
        text += f" {progress['message']}"
    return text


def children_summary(family: dict[str, Any]) -> dict[str, Any] | None:
    """A ``family`` row as ``show`` gives it: ``total``, ``by_status`` (the statuses
    some child has), ``completed_at`` and ``callback_id``; None with no child."""
    if not family["total"]:
        return None
    statuses = ("pending", "published", "running", "succeeded", "dead", "cancelled")
    return {
        "total": family["total"],
        "by_status": {s: family[s] for s in statuses if family[s]},
        "completed_at": family["completed_at"],
        "callback_id": family["callback_id"],
    }


def children_text(children: dict[str, Any] | None) -> str:
    """A ``children_summary`` as one line: ``500: 490 succeeded, 10 dead; callback 9``."""
    if not children:
        return ""
    counts = ", ".join(f"{n} {s}" for s, n in children["by_status"].items())
    text = f"{children['total']}: {counts}"
    if children["callback_id"] is not None:
        text += f"; callback task {children['callback_id']}"
    elif children["completed_at"] is not None:
        text += "; completed (no on_children_done callback)"
    return text


def task_row(row: Sequence[Any]) -> dict[str, Any]:
    """A ``list_tasks`` row as a dict of JSON values."""
    return {k: jsonable(v) for k, v in zip(LIST_COLUMNS, row, strict=True)}


@dataclass(frozen=True)
class Action:
    """One of :data:`ACTIONS` and its argument; build with the class methods."""

    name: str
    run_at: datetime | None = None
    max_attempts: int | None = None
    priority: int | None = None
    #: cancel only: the matched tasks' live descendants too.
    cascade: bool = False

    @classmethod
    def cancel(cls, *, cascade: bool = False) -> Action:
        return cls("cancel", cascade=bool(cascade))

    @classmethod
    def retry(cls) -> Action:
        return cls("retry")

    @classmethod
    def reschedule(cls, run_at: datetime) -> Action:
        if not isinstance(run_at, datetime) or run_at.tzinfo is None:
            raise InvalidFilterError("reschedule needs a time with a time zone")
        return cls("reschedule", run_at=run_at)

    @classmethod
    def set_attempts(cls, max_attempts: int) -> Action:
        try:
            return cls("set-attempts", max_attempts=check_max_attempts(max_attempts))
        except ValueError as exc:
            raise InvalidFilterError(str(exc)) from None

    @classmethod
    def set_priority(cls, priority: int) -> Action:
        try:
            return cls("set-priority", priority=check_priority(priority))
        except ValueError as exc:
            raise InvalidFilterError(str(exc)) from None

    def options(self) -> dict[str, Any]:
        values = {"run_at": self.run_at, "max_attempts": self.max_attempts}
        values["priority"] = self.priority
        values["cascade"] = self.cascade or None
        return {k: jsonable(v) for k, v in values.items() if v is not None}

    def route(self, status: str, run_at: datetime, now: datetime) -> Step | str:
        """The statement for a task in ``status`` (params without the fences), or why
        this action skips it."""
        if self.name == "cancel":
            return _cancel_route(status)
        if self.name == "retry":
            return _retry_route(status, run_at, now)
        if status not in LIVE:
            return f"already {status}: only a live task can be changed"
        if self.name == "reschedule":
            if status == "running":
                return "running: only a task that has not started can be rescheduled"
            if status == "waiting":
                return "waiting: it becomes due when its dependencies have ended (after=)"
            return OQ.reschedule, {"run_at": self.run_at}
        if self.name == "set-attempts":
            return OQ.set_max_attempts, {"max_attempts": self.max_attempts}
        return OQ.set_priority, {"priority": self.priority}


def _cancel_route(status: str) -> Step | str:
    if status in QUEUED:
        return OQ.cancel_queued, {}
    if status == "running":
        return OQ.request_cancel, {}
    return f"already {status}"


def _retry_route(status: str, run_at: datetime, now: datetime) -> Step | str:
    if status in ("dead", "cancelled"):
        return OQ.retry_history, {}
    if status == "pending" and run_at > now:
        return OQ.reschedule, {"run_at": None}
    if status == "succeeded":
        return "succeeded: only a dead or cancelled task can be retried"
    if status == "waiting":
        return "waiting: it runs when its dependencies have ended (after=)"
    return f"{status}: already due or running; nothing to retry"


def _fences(rows: Iterable[dict[str, Any]]) -> dict[str, list[int]]:
    ordered = sorted(rows, key=lambda r: r["id"])  # lock in id order: no deadlocks
    return {"ids": [r["id"] for r in ordered], "epochs": [r["epoch"] for r in ordered]}


#: What a server's plan yields (a statement step) and is sent back (its answer).
Y = TypeVar("Y")
A = TypeVar("A")


@dataclass(frozen=True)
class Statements(Generic[Y, A]):
    """One server's steps of an action (each a generator of its statements): the
    walk of :func:`walk` (paging, routing, counting, auditing) is shared, what a
    step writes is the server's. PostgreSQL's are :data:`PG_STATEMENTS`."""

    #: Insert the audit record (``start_report``'s parameters); its id.
    insert_audit: Callable[[dict[str, Any]], Generator[Y, A, int | None]]
    #: One page of matches, newest first, before id ``before``: ``task_row`` dicts.
    list_page: Callable[[TaskFilter, int, int | None], Generator[Y, A, list[dict[str, Any]]]]
    #: Compare-and-set ``rows`` with the statement an :class:`Action` routed them to
    #: (``OQ``'s, the params without the fences); the ids won.
    change: Callable[[TextClause, dict[str, Any], list[dict[str, Any]]], Generator[Y, A, set[int]]]
    #: The live descendants of ``ids``: rows of (id, epoch, status).
    descendants: Callable[[list[int]], Generator[Y, A, Rows]]
    #: One batch's counts and each task's outcome, into audit record ``audit_id``.
    record: Callable[[int | None, dict[int, str]], Generator[Y, A, None]]


def _batch(
    action: Action,
    page: list[dict[str, Any]],
    report: Report,
    now: datetime,
    statements: Statements[Y, A],
) -> Generator[Y, A, dict[int, str]]:
    """One page: route, compare-and-set, count. Returns each task's outcome."""
    outcome: dict[int, str] = {}
    routes: dict[int, tuple[Step, list[dict[str, Any]]]] = {}
    for row in page:
        run_at = datetime.fromisoformat(row["run_at"])
        routed = action.route(row["status"], run_at, now)
        if isinstance(routed, str):
            outcome[row["id"]] = routed
            report.skip(routed)
        else:
            routes.setdefault(id(routed[0]), (routed, []))[1].append(row)
    for (statement, params), rows in routes.values():
        if report.dry_run:
            won = {r["id"] for r in rows}
        else:
            won = yield from statements.change(statement, params, rows)
        for row in rows:
            outcome[row["id"]] = "changed" if row["id"] in won else MOVED_ON
        report.changed += len(won)
        if statement is OQ.request_cancel:
            report.asked_to_stop += len(won)
        if len(rows) > len(won):
            report.skip(MOVED_ON, len(rows) - len(won))
    if action.cascade:
        below = yield from _cascade([r["id"] for r in page], report, statements)
        outcome.update({k: v for k, v in below.items() if k not in outcome})
    return outcome


#: The outcome recorded for a descendant a cascading cancel changed.
CASCADED = "cancelled with an ancestor (cascade)"


def _cascade(
    ids: list[int], report: Report, statements: Statements[Y, A]
) -> Generator[Y, A, dict[int, str]]:
    """Cancel the live descendants of ``ids``; each one's outcome."""
    outcome: dict[int, str] = {}
    rows = yield from statements.descendants(sorted(ids))
    found: list[dict[str, Any]] = [
        {"id": int(r[0]), "epoch": int(r[1]), "status": str(r[2])} for r in rows
    ]
    for statement in (OQ.cancel_queued, OQ.request_cancel):
        group = [r for r in found if (r["status"] in QUEUED) == (statement is OQ.cancel_queued)]
        if not group:
            continue
        if report.dry_run:
            won = {r["id"] for r in group}
        else:
            won = yield from statements.change(statement, {}, group)
        for row in group:
            outcome[row["id"]] = CASCADED if row["id"] in won else MOVED_ON
        report.cascaded += len(won)
        if statement is OQ.request_cancel:
            report.asked_to_stop += len(won)
    return outcome


def start_report(
    action: Action,
    selection: TaskFilter,
    actor: str,
    reason: str | None,
    dry_run: bool,
    report: Report | None,
) -> tuple[Report, dict[str, Any] | None]:
    """Check an action's request (a selection that selects something, an actor) and
    start its :class:`Report`; with it, the audit record's parameters (None for a
    dry run, which records nothing). Shared by each server's plan of an action."""
    if not selection.selects_anything:
        raise InvalidFilterError(
            f"{action.name} needs task ids or a filter (--status, --kind, ...); "
            "it never acts on every task by default"
        )
    if not actor:
        raise InvalidFilterError("an action needs an actor (who is acting)")
    report = report or Report(action.name)
    report.dry_run = dry_run
    if dry_run:
        return report, None
    return report, {
        "actor": actor,
        "action": action.name,
        "selection": json.dumps(selection.describe()),
        "options": json.dumps(action.options()),
        "reason": reason,
    }


def walk(
    action: Action,
    selection: TaskFilter,
    statements: Statements[Y, A],
    *,
    actor: str,
    reason: str | None = None,
    dry_run: bool = False,
    batch_size: int = BATCH_SIZE,
    report: Report | None = None,
) -> Generator[Y | None, A, Report]:
    """The steps of ``action`` over ``selection`` with one server's ``statements``,
    :data:`COMMIT` at each batch's end; returns the :class:`Report` (``report``, if
    given: a caller may read it at each :data:`COMMIT` for progress)."""
    report, audit = start_report(action, selection, actor, reason, dry_run, report)
    if audit is not None:
        report.audit_id = yield from statements.insert_audit(audit)
    seen: set[int] = set()
    before: int | None = None
    while selection.limit is None or report.matched < selection.limit:
        want = batch_size if selection.limit is None else selection.limit - report.matched
        want = min(want, batch_size)
        page = yield from statements.list_page(selection, want, before)
        if not page:
            break
        before = page[-1]["id"]
        seen.update(r["id"] for r in page)
        report.matched += len(page)
        outcome = yield from _batch(action, page, report, datetime.now(UTC), statements)
        if not dry_run:
            yield from statements.record(report.audit_id, outcome)
        yield COMMIT
        if len(page) < want:
            break
    missing = sorted(set(selection.ids) - seen) if selection.before is None else []
    if missing:
        report.matched += len(missing)
        report.skip(NOT_FOUND, len(missing))
        if not dry_run:
            yield from statements.record(report.audit_id, dict.fromkeys(missing, NOT_FOUND))
            yield COMMIT
    return report


def outcome_counts(outcome: dict[int, str]) -> dict[str, int]:
    """A batch's counts for its audit record: matched, changed (a cascaded descendant
    too), skipped."""
    changed = sum(1 for o in outcome.values() if o in ("changed", CASCADED))
    return {"matched": len(outcome), "changed": changed, "skipped": len(outcome) - changed}


def _insert_audit(audit: dict[str, Any]) -> Generator[Step, Rows, int]:
    answer = yield OQ.insert_audit, audit
    return int(answer[0][0])


def _list_page(
    selection: TaskFilter, want: int, before: int | None
) -> Generator[Step, Rows, list[dict[str, Any]]]:
    return [task_row(r) for r in (yield OQ.list_tasks, selection.params(want, before))]


def _change(
    statement: TextClause, params: dict[str, Any], rows: list[dict[str, Any]]
) -> Generator[Step, Rows, set[int]]:
    """PostgreSQL's compare-and-set is one statement: it returns the ids it won."""
    answer = yield statement, {**params, **_fences(rows)}
    return {int(r[0]) for r in answer}


def _descendants(ids: list[int]) -> Generator[Step, Rows, Rows]:
    return (yield OQ.live_descendants, {"ids": ids})


def _record(audit_id: int | None, outcome: dict[int, str]) -> Generator[Step, Rows, None]:
    params: dict[str, Any] = {"audit_id": audit_id, **outcome_counts(outcome)}
    params.update(task_ids=list(outcome), outcomes=list(outcome.values()))
    yield OQ.record_audit_batch, params


#: PostgreSQL's steps of an action (``operations.sql``).
PG_STATEMENTS: Statements[Step, Rows] = Statements(
    _insert_audit, _list_page, _change, _descendants, _record
)


def plan(action: Action, selection: TaskFilter, **options: Unpack[ReportedPlanOptions]) -> Plan:
    """The statements of ``action`` over ``selection`` on PostgreSQL (:func:`walk`
    with :data:`PG_STATEMENTS`); returns the :class:`Report`."""
    return (yield from walk(action, selection, PG_STATEMENTS, **options))
