"""Who is signed in: the sign-in form, the session, the bearer token, the gate.

With no password and no token configured (loopback only, see
:func:`.settings.check_bind`) everyone is :data:`~.settings.LOCAL_USER`.
Otherwise :class:`AuthGate` lets through only ``/login`` and ``/static``
until the session names a user: a page request is sent to ``/login``, anything
else gets 401. Passwords and tokens are compared with
:func:`hmac.compare_digest` (constant time); a failed sign-in waits
:data:`FAILED_DELAY_S` before answering. The session lives in a cookie signed
with ``LEDGERQ_DASHBOARD_SECRET`` (Starlette's ``SessionMiddleware``:
``HttpOnly``, ``SameSite=Lax``), holding the user name and the CSRF token,
never a password. Signing out clears it.

The signed-in user is the actor of every action (``dashboard:<user>``).
"""

from __future__ import annotations

import asyncio
import hmac
from typing import Any

from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from ledgerq.dashboard import csrf
from ledgerq.dashboard.pages import render
from ledgerq.dashboard.settings import LOCAL_USER, DashboardSettings

FAILED_DELAY_S = 0.5
PUBLIC = ("/login", "/static/")
SESSION_USER = "user"


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def authenticate(settings: DashboardSettings, user: str, password: str) -> str | None:
    """The user the form's credentials sign in, or None."""
    if _same(user, settings.user) and _same(password, settings.password):
        return settings.user
    if _same(password, settings.token):
        return "token"
    return None


def bearer_user(settings: DashboardSettings, header: str | None) -> str | None:
    if settings.token is None or not header or not header.startswith("Bearer "):
        return None
    return "token" if _same(header[len("Bearer ") :].strip(), settings.token) else None


def current_user(request: Request) -> str:
    """The signed-in user (the gate has made sure there is one)."""
    user = request.scope.get("ledgerq.user")
    assert isinstance(user, str)
    return user


def actor(request: Request) -> str:
    return f"dashboard:{current_user(request)}"


class AuthGate:
    """ASGI middleware, inside the session middleware: sets ``scope["ledgerq.user"]``
    or turns the request away."""

    def __init__(self, app: ASGIApp, settings: DashboardSettings) -> None:
        self.app = app
        self.settings = settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        user = self._user(scope)
        if user is not None or scope["path"].startswith(PUBLIC):
            scope["ledgerq.user"] = user
            await self.app(scope, receive, send)
            return
        response: Response
        if scope["method"] == "GET":
            url = URL(scope=scope)
            target = url.path + (f"?{url.query}" if url.query else "")
            response = RedirectResponse(URL("/login").include_query_params(next=target), 303)
        else:
            response = PlainTextResponse("sign in first", 401)
        await response(scope, receive, send)

    def _user(self, scope: Scope) -> str | None:
        if not self.settings.auth_configured:
            return LOCAL_USER
        headers = dict(scope["headers"])
        raw = headers.get(b"authorization")
        token_user = bearer_user(self.settings, raw.decode("latin-1") if raw else None)
        if token_user is not None:
            scope["ledgerq.bearer"] = True
            return token_user
        session: dict[str, Any] = scope.get("session", {})
        user = session.get(SESSION_USER)
        return user if isinstance(user, str) else None


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a local path only (no open redirect)."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


async def login_page(request: Request) -> Response:
    if not request.app.state.dashboard.auth_configured:
        return RedirectResponse("/", 303)
    return render(request, "login.html", next=safe_next(request.query_params.get("next")))


@csrf.protect
async def login(request: Request) -> Response:
    settings: DashboardSettings = request.app.state.dashboard
    form = await request.form()
    user, password = str(form.get("user") or ""), str(form.get("password") or "")
    target = safe_next(str(form.get("next") or "/"))
    signed_in = authenticate(settings, user, password) if settings.auth_configured else None
    if signed_in is None:
        await asyncio.sleep(FAILED_DELAY_S)
        return render(
            request, "login.html", status_code=401, next=target, typed_user=user,
            error="wrong user name or password",
        )  # fmt: skip
    request.session.clear()  # a new session (and CSRF token) for the signed-in user
    request.session[SESSION_USER] = signed_in
    return RedirectResponse(target, 303)


@csrf.protect
async def logout(request: Request) -> Response:
    request.session.clear()
    return RedirectResponse("/login", 303)
