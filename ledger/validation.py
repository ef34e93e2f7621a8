"""Producer-side validation: everything is checked before anything is written."""

from __future__ import annotations

import json
import math
import re
from datetime import datetime, timedelta

from ledgerq.ledger.errors import InvalidTaskError, PayloadTooLargeError

#: The largest JSON-encoded payload accepted, in bytes. Tasks carry references,
#: not blobs: a payload past this belongs in a table or an object store.
MAX_PAYLOAD_BYTES = 256 * 1024

#: Kinds and queue names: a letter, then letters, digits, ``_ . : -``; at most 200.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:\-]{0,199}")
MAX_BUSINESS_KEY = 512
MAX_ATTEMPTS = 10_000
# \u0000 in JSON text, not preceded by an escaped backslash (an even run of them).
_JSON_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")
PRIORITY_RANGE = range(0, 10)
MAX_SECONDS = 10 * 365 * 24 * 3600.0
MAX_SHARD = 32767  # smallint


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidTaskError(f"task {what} must be a non-empty string, got {value!r}")
    if not _NAME.fullmatch(value):
        raise InvalidTaskError(
            f"task {what} {value!r} is malformed: use a letter, then letters, digits or "
            "'_', '.', ':', '-' (at most 200 characters)"
        )
    return value


def encode_payload(payload: object) -> str:
    """The payload as compact JSON text, or :class:`InvalidTaskError`."""
    try:
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise InvalidTaskError(f"task payload is not JSON-serialisable: {exc}") from exc
    if _JSON_NUL.search(text):
        raise InvalidTaskError(
            "task payload contains a NUL character (\\u0000), which PostgreSQL's jsonb cannot store"
        )
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(
            f"task payload is {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}"
        )
    return text


def check_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise InvalidTaskError(
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS}, got {value!r}"
        )
    return value


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITY_RANGE:
        raise InvalidTaskError(f"priority must be an integer from 0 to 9, got {value!r}")
    return value


def check_optional_seconds(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidTaskError(f"{what} must be a number of seconds, got {value!r}")
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds) or seconds < 0:
        raise InvalidTaskError(f"{what} must be zero or more seconds, got {value!r}")
    if seconds > MAX_SECONDS:
        raise InvalidTaskError(
            f"{what} must be at most {MAX_SECONDS:.0f} seconds (10 years), got {value!r}"
        )
    return seconds


def resolve_due(
    run_at: datetime | None, delay: float | timedelta | None
) -> tuple[datetime | None, float]:
    """``(run_at, delay_s)``: an explicit due time, or a delay from the database's clock."""
    if run_at is not None and delay is not None:
        raise InvalidTaskError("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime) or run_at.tzinfo is None:
            raise InvalidTaskError(f"run_at must be a timezone-aware datetime, got {run_at!r}")
        return run_at, 0.0
    return None, check_optional_seconds(delay, "delay") or 0.0


def check_business_key(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_BUSINESS_KEY or "\x00" in value:
        raise InvalidTaskError(
            f"business_key must be a non-empty string of at most {MAX_BUSINESS_KEY} characters "
            "without NUL"
        )
    return value


def check_int_option(value: object, what: str, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidTaskError(
            f"{what} must be an integer from {minimum} to {maximum}, got {value!r}"
        )
    return value
