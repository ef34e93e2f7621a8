"""Cancel, retry and reschedule, for one task or for every task of a filter.

Every action runs :meth:`~ledgerq.ledger.protocol.OperationsLedger.act`, as
``ledgerq tasks`` does: in batches, each a transaction of fenced
compare-and-sets plus its audit lines, with ``dashboard:<user>`` as the actor.
A bulk action is two requests: ``GET /actions/<action>?<filter>`` counts what
it would do (a dry run: nothing written) and shows a confirmation form;
``POST /actions/<action>`` (CSRF-protected) does it and shows the report. A
filter with no criterion is refused (as in the CLI: never every task by
default). Between the count and the confirmation tasks may move on; the
report says what was actually changed and skipped, and why.

Races: as in the CLI, a task that moved on since it was listed is skipped, never
overwritten (:mod:`ledgerq.ledger.actions`).
"""

from __future__ import annotations

from starlette.datastructures import FormData, QueryParams
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ledgerq.core.errors import InvalidFilterError
from ledgerq.dashboard import csrf
from ledgerq.dashboard.auth import actor
from ledgerq.dashboard.pages import render
from ledgerq.dashboard.tasks import criteria, query_string, selection
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import TaskFilter, parse_time

#: The actions the dashboard offers, with their button text.
OFFERED = {"cancel": "Cancel", "retry": "Retry", "reschedule": "Reschedule"}
FLASH = "flash"


def build(name: str, values: QueryParams | FormData) -> Action:
    """The :class:`Action` ``name`` with its argument (reschedule: ``in`` or ``at``)."""
    if name == "cancel":
        return Action.cancel()
    if name == "retry":
        return Action.retry()
    if name == "reschedule":
        at, within = str(values.get("at") or "").strip(), str(values.get("in") or "").strip()
        if bool(at) == bool(within):
            raise InvalidFilterError("reschedule: give exactly one of 'at' (a time) or 'in' (30m)")
        when = parse_time(at, "at") if at else parse_time(within, "in", ago=False)
        return Action.reschedule(when)
    raise HTTPException(404, f"no action {name!r}; the dashboard offers {', '.join(OFFERED)}")


def _reason(form: FormData) -> str | None:
    text = str(form.get("reason") or "").strip()
    return text[:500] or None


async def preview(request: Request) -> Response:
    name = request.path_params["action"]
    params = request.query_params
    action = build(name, params)
    chosen = selection(params, paged=False)
    report = await request.app.state.ledger.act(action, chosen, actor=actor(request), dry_run=True)
    # What is confirmed is what was counted: relative times fixed now.
    fields = criteria(params)
    for key in ("since", "until"):
        value = getattr(chosen, key)
        if value is not None:
            fields[key] = value.isoformat()
    arguments = {"at": action.run_at.isoformat()} if action.run_at is not None else {}
    return render(
        request, "confirm.html", action=name, title=OFFERED[name], report=report,
        fields=fields, arguments=arguments,
        filter_query=query_string(criteria(params)),
    )  # fmt: skip


@csrf.protect
async def bulk(request: Request) -> Response:
    name = request.path_params["action"]
    form = await request.form()
    action = build(name, form)
    fields = {k: v for k, v in form.multi_items() if k not in ("csrf", "reason", "at", "in")}
    params = QueryParams([(k, str(v)) for k, v in form.multi_items() if k in fields])
    chosen = selection(params, paged=False)
    report = await request.app.state.ledger.act(
        action, chosen, actor=actor(request), reason=_reason(form)
    )
    return render(
        request, "done.html", action=name, title=OFFERED[name], report=report,
        filter_query=query_string(criteria(params)),
    )  # fmt: skip


def summary(report: Report) -> str:
    """One line for the task page after an action on it."""
    if report.changed:
        what = "asked to stop" if report.asked_to_stop else "done"
        return f"{report.action}: {what} (audit #{report.audit_id})"
    reasons = "; ".join(report.reasons) or "nothing matched"
    return f"{report.action}: not changed: {reasons} (audit #{report.audit_id})"


@csrf.protect
async def one(request: Request) -> Response:
    task_id = int(request.path_params["task_id"])
    form = await request.form()
    action = build(request.path_params["action"], form)
    report = await request.app.state.ledger.act(
        action, TaskFilter(ids=(task_id,)), actor=actor(request), reason=_reason(form)
    )
    request.session[FLASH] = summary(report)
    return RedirectResponse(f"/tasks/{task_id}", 303)
