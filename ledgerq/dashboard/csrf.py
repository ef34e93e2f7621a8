"""CSRF protection: every state-changing request carries the session's token.

The token is random per session (:func:`token`, created on first use and kept in
the signed session cookie); a form sends it in the hidden field ``csrf``, a
script in the ``X-CSRF-Token`` header. :func:`protect` wraps every POST
endpoint: without the session's token (compared in constant time) the answer is
403 and nothing is read or changed. The cookie is ``SameSite=Lax`` as well, so
a cross-site POST does not even carry the session; the token is the second
lock. A request authenticated by ``Authorization: Bearer`` (a script, not a
browser) needs no token: a browser never adds that header on its own.
"""

from __future__ import annotations

import functools
import hmac
import secrets
from collections.abc import Awaitable, Callable

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

FIELD = "csrf"
HEADER = "x-csrf-token"

Endpoint = Callable[[Request], Awaitable[Response]]


def token(request: Request) -> str:
    """The session's CSRF token (created now if the session has none)."""
    value = request.session.get(FIELD)
    if not isinstance(value, str):
        value = request.session[FIELD] = secrets.token_urlsafe(32)
    return value


async def check(request: Request) -> None:
    """Raise 403 unless the request carries the session's token."""
    if request.scope.get("ledgerq.bearer"):
        return
    expected = request.session.get(FIELD)
    sent = request.headers.get(HEADER)
    if sent is None:
        form = await request.form()
        field = form.get(FIELD)
        sent = field if isinstance(field, str) else None
    if not isinstance(expected, str) or not sent:
        raise HTTPException(403, "missing CSRF token: reload the page and try again")
    if not hmac.compare_digest(expected.encode(), sent.encode()):
        raise HTTPException(403, "wrong CSRF token: reload the page and try again")


def protect(endpoint: Endpoint) -> Endpoint:
    """A POST endpoint that refuses a request without the CSRF token."""

    @functools.wraps(endpoint)
    async def checked(request: Request) -> Response:
        await check(request)
        return await endpoint(request)

    checked.csrf_protected = True  # type: ignore[attr-defined]
    return checked
