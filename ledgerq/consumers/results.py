"""What a handler hands back: a JSON result, or a stop after an operator's cancel.

A handler's return value is stored with the terminal status (``result``; ``show``
and ``tasks list --json`` print it). It must be JSON (``json.dumps`` with no NaN
or infinity) of at most :data:`~ledgerq.ledger.validation.MAX_PAYLOAD_BYTES`
encoded; ``None`` stores nothing. A value that is not is a bug in the handler,
not bad luck: the attempt fails **final** (the task ends ``dead``, no retry, the
writes through ``ctx.session`` rolled back) with the reason in ``last_error``,
because running the same code again returns the same value.

Cancel (``ledgerq tasks cancel`` on a running task) is cooperative:
``ctx.cancel_requested`` turns true within one heartbeat. A handler that then
returns, raises :class:`Cancelled` or raises anything else, or times out, ends
``cancelled``, and its ``ctx.session`` writes roll back. A handler may raise
:class:`Cancelled` on its own, too.
"""

from __future__ import annotations

import json
from typing import Any

from ledgerq.ledger.validation import MAX_PAYLOAD_BYTES


class Cancelled(Exception):
    """Raise from a handler to end the task ``cancelled`` now (typically once
    ``ctx.cancel_requested`` is true); its ``ctx.session`` writes roll back."""


class ResultNotJSONError(Exception):
    """A handler returned a value that cannot be stored as its result."""


def encode_result(value: Any) -> str | None:
    """The handler's return value as compact JSON text (None for None)."""
    if value is None:
        return None
    try:
        text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        raise ResultNotJSONError(
            f"the handler returned a value that is not JSON ({type(value).__name__}: {exc}); "
            "return JSON (dicts, lists, str, int, float, bool, None) or nothing"
        ) from None
    if "\\u0000" in text:
        raise ResultNotJSONError("the handler's result holds a NUL character (\\u0000)")
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise ResultNotJSONError(
            f"the handler's result is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES} "
            "because a result is stored in the task's ledger row, which result(), "
            "ctx.dependencies, show and the dashboard read whole: store a large output "
            "elsewhere (object storage, a table of yours) and return its address"
        )
    return text


CANCELLED_ON_REQUEST = "cancelled by an operator's request (ctx.cancel_requested)"
