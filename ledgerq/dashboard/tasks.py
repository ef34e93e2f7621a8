"""The task list and the task page.

The list takes the same filters as ``ledgerq tasks list`` (query parameters
``status`` (repeatable), ``kind``, ``queue``, ``key``, ``since``, ``until``,
``error``, ``tag`` (repeatable, each may hold several comma-separated: a tag
never holds a comma; every one must match), ``before``), parsed by the same :meth:`TaskFilter.parse
<ledgerq.ledger.filters.TaskFilter.parse>` and listed by the same
:meth:`~ledgerq.ledger.protocol.OperationsLedger.list_tasks`: newest first,
:data:`PAGE` per page, the next page by keyset (``before`` = the last id
shown). A bad filter is a 400 page with the filter's one-line reason.

The task page shows every column that matters to an operator: the payload, the
result, the checkpoint, each attempt with its error (``attempt_log``), the
last error, the children (tasks whose ``parent_id`` is this one) and the audit
trail (the actions that touched it), with the actions it allows.
"""

from __future__ import annotations

from typing import Any

from starlette.datastructures import QueryParams
from starlette.requests import Request
from starlette.responses import Response

from ledgerq.core.errors import InvalidFilterError
from ledgerq.dashboard.pages import render
from ledgerq.ledger.filters import STATUSES, TaskFilter

PAGE = 50
#: Query parameter -> TaskFilter.parse argument.
TEXT_FIELDS = {
    "kind": "kind",
    "queue": "queue",
    "key": "business_key",
    "since": "since",
    "until": "until",
    "error": "error",
}


def criteria(params: QueryParams) -> dict[str, Any]:
    """The filter's fields as the form shows them (empty ones left out)."""
    out: dict[str, Any] = {k: params[k].strip() for k in TEXT_FIELDS if params.get(k, "").strip()}
    statuses = [s for s in params.getlist("status") if s]
    if statuses:
        out["status"] = statuses
    tags = [t.strip() for v in params.getlist("tag") for t in v.split(",") if t.strip()]
    if tags:
        out["tag"] = list(dict.fromkeys(tags))
    return out


def selection(params: QueryParams, *, paged: bool = True) -> TaskFilter:
    """The :class:`TaskFilter` of the query parameters (``paged``: with ``before``
    and the page size, as the list uses it; else every match, as an action does)."""
    fields = criteria(params)
    options: dict[str, Any] = {TEXT_FIELDS[k]: v for k, v in fields.items() if k in TEXT_FIELDS}
    if "tag" in fields:
        options["tags"] = tuple(fields["tag"])
    if paged:
        before = params.get("before", "").strip()
        if before:
            if not before.isdigit():
                raise InvalidFilterError(f"before must be a task id, got {before!r}")
            options["before"] = int(before)
        options["limit"] = PAGE
    return TaskFilter.parse(statuses=fields.get("status", ()), **options)


def query_string(fields: dict[str, Any], **extra: Any) -> str:
    params: list[tuple[str, str]] = []
    for key, value in {**fields, **extra}.items():
        for item in value if isinstance(value, list) else [value]:
            params.append((key, str(item)))
    return str(QueryParams(params))


async def listing(request: Request) -> Response:
    fields = criteria(request.query_params)
    rows = await request.app.state.ledger.list_tasks(selection(request.query_params))
    next_page = query_string(fields, before=rows[-1]["id"]) if len(rows) == PAGE else None
    return render(
        request, "tasks.html", rows=rows, fields=fields, statuses=STATUSES,
        next_page=next_page, filter_query=query_string(fields),
        filtered=bool(fields),
    )  # fmt: skip


async def detail(request: Request) -> Response:
    task_id = int(request.path_params["task_id"])
    ledger = request.app.state.ledger
    task = await ledger.find(task_id)
    children = await ledger.children(task_id)
    flash = request.session.pop("flash", None)
    return render(request, "task.html", task=task, children=children, flash=flash)
