"""The dashboard's ASGI application: :func:`create_app` puts the pieces together.

Layers, outermost first: security headers (a strict Content-Security-Policy:
scripts and styles only from this origin, so an injected ``<script>`` would not
run even if escaping failed; no framing), the signed session cookie, the
sign-in gate (:class:`~.auth.AuthGate`), then the routes. Templates are Jinja2
with autoescaping on for every file: a value is text unless a template says
otherwise, and none does. An error page shows one line, masked
(:func:`~ledgerq.core.masking.mask_text`) with the secrets the process knows:
a database or broker password never reaches a page.

The ledger is the application's (``app.state.ledger``): the caller opens it and
closes it (:mod:`.serve`, or a test).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from importlib import resources

from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.sessions import SessionMiddleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ledgerq.core.errors import (
    InvalidFilterError,
    LedgerqError,
    PrivilegeMissingError,
    TaskNotFoundError,
)
from ledgerq.core.masking import mask_text
from ledgerq.dashboard import actions, auth, overview, tasks
from ledgerq.dashboard.pages import escape, render
from ledgerq.dashboard.settings import DashboardSettings
from ledgerq.ledger.protocol import DashboardLedger

log = logging.getLogger("ledgerq.dashboard")

SESSION_COOKIE = "ledgerq_dashboard"
SESSION_MAX_AGE_S = 12 * 3600
HEADERS = {
    "content-security-policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}


class SecurityHeaders:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, with_headers)


def _error_page(request: Request, status: int, message: str) -> Response:
    masked = mask_text(message, request.app.state.secrets)
    if request.method != "GET" and status == 403:
        return HTMLResponse(f"<p>403: {escape(masked)}</p>", 403)
    return render(request, "error.html", status_code=status, status=status, message=masked)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return _error_page(request, exc.status_code, str(exc.detail))


async def _ledger_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, TaskNotFoundError):
        return _error_page(request, 404, str(exc))
    if isinstance(exc, InvalidFilterError):
        return _error_page(request, 400, str(exc))
    if isinstance(exc, PrivilegeMissingError):  # an operator's login trying an action
        return _error_page(request, 403, str(exc))
    log.warning("dashboard: %s", mask_text(str(exc), request.app.state.secrets))
    return _error_page(request, 503, f"the ledger could not answer: {exc}")


def create_app(
    ledger: DashboardLedger, settings: DashboardSettings, secrets: Iterable[str] = ()
) -> Starlette:
    """The application over an open ``ledger``; ``secrets`` (database and broker
    passwords) are masked out of every error shown or logged."""
    static = resources.files("ledgerq.dashboard").joinpath("static")
    routes = [
        Route("/", overview.page),
        Route("/tasks", tasks.listing),
        Route("/tasks/{task_id:int}", tasks.detail),
        Route("/tasks/{task_id:int}/{action:str}", actions.one, methods=["POST"]),
        Route("/actions/{action:str}", actions.preview),
        Route("/actions/{action:str}", actions.bulk, methods=["POST"]),
        Route("/login", auth.login_page),
        Route("/login", auth.login, methods=["POST"]),
        Route("/logout", auth.logout, methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(static)), name="static"),
    ]
    app = Starlette(
        routes=routes,
        middleware=[
            Middleware(SecurityHeaders),
            Middleware(
                SessionMiddleware,
                secret_key=settings.secret,
                session_cookie=SESSION_COOKIE,
                max_age=SESSION_MAX_AGE_S,
                same_site="lax",
            ),
            Middleware(auth.AuthGate, settings=settings),
        ],
        exception_handlers={HTTPException: _http_error, LedgerqError: _ledger_error},
    )
    app.state.ledger = ledger
    app.state.dashboard = settings
    app.state.secrets = sorted({*settings.secrets(), *(s for s in secrets if s)})
    return app


def post_routes(app: Starlette) -> list[Route]:
    """The state-changing routes (each must be :func:`.csrf.protect`-ed; a test checks)."""
    return [r for r in app.routes if isinstance(r, Route) and "POST" in (r.methods or ())]
