"""Pages: the Jinja2 environment (autoescaping on, for every template) and
:func:`render`, which gives every template the user and the CSRF token."""

from __future__ import annotations

import json
from typing import Any

import jinja2
from markupsafe import escape as _escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ledgerq.dashboard import csrf
from ledgerq.ledger.actions import children_text, progress_text

_ENV = jinja2.Environment(
    loader=jinja2.PackageLoader("ledgerq.dashboard", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def _pretty(value: Any) -> str:
    """JSON for a ``<pre>`` block (escaped by the template like any text)."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _when(value: str | None) -> str:
    return "" if not value else value[:19].replace("T", " ")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "\N{EN DASH}"
    if seconds == float("inf"):
        return "> 3 h"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms" if seconds >= 0.01 else f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _last_line(text: str | None) -> str:
    """A traceback's exception line (the last non-empty line), cut to 300 characters."""
    lines = [ln for ln in (text or "").strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


_ENV.filters.update(
    pretty=_pretty,
    when=_when,
    duration=_duration,
    last_line=_last_line,
    progress=progress_text,
    children=children_text,
)


def escape(text: str) -> str:
    return str(_escape(text))


def render(request: Request, template: str, status_code: int = 200, **context: Any) -> Response:
    """A page: ``template`` with ``context``, the user and the CSRF token."""
    body = _ENV.get_template(template).render(
        request=request,
        user=request.scope.get("ledgerq.user"),
        auth=request.app.state.dashboard.auth_configured,
        csrf_token=csrf.token(request),
        **context,
    )
    return HTMLResponse(body, status_code)
