"""Producer-side validation: everything is checked before anything is written.

Every check raises :class:`~ledgerq.core.errors.InvalidTaskError` (or a
subclass) whose message starts with the field it refused (``payload['a'][2]``,
``business_key``, ``delay``...), so a rejected enqueue never reaches the
database and the caller's transaction stays usable.

What a payload may hold, and how it comes back to the handler (JSON through
PostgreSQL's ``jsonb``):

* ``None``, ``bool``, ``str``, ``int``, ``float``, and ``dict`` / ``list`` /
  ``tuple`` of those, nested at most :data:`MAX_PAYLOAD_DEPTH` containers deep
  (checked by an explicit stack, never by recursion). A tuple comes back as a list.
* Dictionary keys must be strings: ``{1: "a"}`` is refused, never silently
  turned into ``{"1": "a"}`` (which could merge two keys and lose data).
* Strings (values and keys) must be valid Unicode that UTF-8 can encode (no lone
  surrogates such as ``"\\ud800"``) and hold no NUL (``jsonb`` cannot store it).
* Numbers round-trip exactly or are refused: an ``int`` of up to
  :data:`MAX_PAYLOAD_INT_DIGITS` digits comes back as the same ``int``; a finite
  ``float`` whose magnitude is below ``1e16`` comes back as the same ``float``
  (``-0.0`` comes back as ``0.0``, which compares equal). NaN, infinities and
  floats of ``1e16`` or more are refused (PostgreSQL would hand the latter back
  as an integer, not the same value); pass such numbers as strings.
* Size: at most :data:`MAX_PAYLOAD_BYTES` as compact JSON, and at most
  :data:`MAX_CLAIM_PAYLOAD_BYTES` as PostgreSQL prints it (the form a worker
  receives; workers refuse to load anything larger, see the claim).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import datetime, timedelta

from ledgerq.core.errors import InvalidRetryPolicyError, InvalidTaskError, PayloadTooLargeError
from ledgerq.ledger.retry import RetryPolicy

#: The largest JSON-encoded payload accepted, in bytes. Tasks carry references,
#: not blobs: a payload past this belongs in a table or an object store.
MAX_PAYLOAD_BYTES = 256 * 1024
#: The largest payload a worker's claim loads, measured as PostgreSQL prints the
#: jsonb (what the worker receives). A larger one (inserted behind the producer's
#: back) is not loaded: the task ends dead with "payload too large".
MAX_CLAIM_PAYLOAD_BYTES = 4 * MAX_PAYLOAD_BYTES
#: Containers nested deeper than this are refused (``[[...]]`` counts two).
MAX_PAYLOAD_DEPTH = 64
#: Integers longer than this (in decimal digits) are refused.
MAX_PAYLOAD_INT_DIGITS = 4000
_INT_LIMIT = 10**MAX_PAYLOAD_INT_DIGITS
#: Floats at or beyond this magnitude are refused (jsonb returns them as integers).
FLOAT_LIMIT = 1e16

#: Kinds and queue names: a letter, then letters, digits, ``_ . : -``; at most 200.
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.:\-]{0,199}")
MAX_BUSINESS_KEY = 512
MAX_ATTEMPTS = 10_000
MAX_RETRY_SCHEDULE = 1000
PRIORITY_RANGE = range(0, 10)
MAX_SECONDS = 10 * 365 * 24 * 3600.0
MAX_SHARD = 32767  # smallint


def _path(parts: tuple[object, ...]) -> str:
    return "payload" + "".join(f"[{p!r}]" for p in parts)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_text(value: str, what: str) -> str:
    """A string PostgreSQL can store: UTF-8 encodable (no lone surrogates), no NUL."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidTaskError(
                f"{what}: not valid Unicode text (a lone surrogate {value[exc.start]!r} at "
                f"character {exc.start}); it cannot be encoded as UTF-8"
            ) from None
    if "\x00" in value:
        raise InvalidTaskError(f"{what}: contains a NUL character, which PostgreSQL cannot store")
    return value


def _check_number(value: int | float, parts: tuple[object, ...]) -> int:
    """Refuse a number that does not round-trip; return how many bytes PostgreSQL's
    text form adds to the compact JSON of it."""
    if isinstance(value, int):
        if not -_INT_LIMIT < value < _INT_LIMIT:
            raise InvalidTaskError(
                f"{_path(parts)}: an integer of more than {MAX_PAYLOAD_INT_DIGITS} digits; "
                "pass it as a string"
            )
        return 0
    if not math.isfinite(value):
        raise InvalidTaskError(
            f"{_path(parts)}: {value!r} is not JSON-serialisable (JSON numbers are finite)"
        )
    if abs(value) >= FLOAT_LIMIT:
        raise InvalidTaskError(
            f"{_path(parts)}: the float {value!r} is 1e16 or more, which PostgreSQL gives back "
            "as an integer; pass an int or a string"
        )
    text = repr(value)
    if "e-" not in text:
        return 0
    # 1.5e-07 is printed 0.00000015: the exponent becomes leading zeros.
    mantissa, exponent = text.lstrip("-").split("e-")
    digits = len(mantissa.replace(".", ""))
    return max(0, int(exponent) + 1 + digits - len(text.lstrip("-")))


def _children(
    value: object, depth: int, parts: tuple[object, ...]
) -> list[tuple[object, int, tuple[object, ...]]] | None:
    """A container's items to walk next (None if ``value`` is not a container)."""
    if not isinstance(value, Mapping | list | tuple):
        return None
    if depth >= MAX_PAYLOAD_DEPTH:
        raise InvalidTaskError(f"{_path(parts)}: nested more than {MAX_PAYLOAD_DEPTH} levels deep")
    if isinstance(value, list | tuple):
        return [(item, depth + 1, (*parts, i)) for i, item in enumerate(value)]
    if not isinstance(value, dict):
        raise InvalidTaskError(f"{_path(parts)}: a {type(value).__name__} is not JSON; use a dict")
    items = []
    for key, item in value.items():
        if not isinstance(key, str):
            raise InvalidTaskError(
                f"{_path(parts)}: key {_short(key)} is not a string (JSON object keys "
                "are strings; ledgerq does not convert them)"
            )
        check_text(key, f"{_path(parts)}: key {_short(key)}")
        items.append((item, depth + 1, (*parts, key)))
    return items


def check_payload(payload: object) -> int:
    """Walk the payload without recursion; refuse anything that would not round-trip.

    Returns how many bytes PostgreSQL's text form of the payload adds to its
    compact JSON (separators printed with a space, tiny floats without exponent)."""
    extra = 0
    stack: list[tuple[object, int, tuple[object, ...]]] = [(payload, 0, ())]
    while stack:
        value, depth, parts = stack.pop()
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str):
            check_text(value, _path(parts))
        elif isinstance(value, int | float):
            extra += _check_number(value, parts)
        else:
            children = _children(value, depth, parts)
            if children is None:
                raise InvalidTaskError(
                    f"{_path(parts)}: a {type(value).__name__} ({_short(value)}) is not "
                    "JSON-serialisable"
                )
            # ", " between items and ": " after each key, as PostgreSQL prints them
            extra += len(children) * (2 if isinstance(value, dict) else 1)
            stack.extend(children)
    return extra


def encode_payload(payload: object) -> str:
    """The payload as compact JSON text, or :class:`InvalidTaskError`."""
    extra = check_payload(payload)
    try:
        text = json.dumps(payload, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:  # the walk should have caught it
        raise InvalidTaskError(f"payload: not JSON-serialisable: {exc}") from None
    size = len(text.encode())
    if size > MAX_PAYLOAD_BYTES:
        raise PayloadTooLargeError(
            f"payload: {size} bytes encoded; the limit is {MAX_PAYLOAD_BYTES}"
        )
    if size + extra > MAX_CLAIM_PAYLOAD_BYTES:
        raise PayloadTooLargeError(
            f"payload: about {size + extra} bytes as PostgreSQL prints it (tiny floats are "
            f"printed without an exponent); workers load at most {MAX_CLAIM_PAYLOAD_BYTES}"
        )
    return text


def check_name(value: object, what: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidTaskError(f"task {what} must be a non-empty string, got {_short(value)}")
    if not _NAME.fullmatch(value):
        raise InvalidTaskError(
            f"task {what} {_short(value)} is malformed: use a letter, then letters, digits or "
            "'_', '.', ':', '-' (at most 200 characters)"
        )
    return value


def check_max_attempts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_ATTEMPTS:
        raise InvalidTaskError(
            f"max_attempts must be an integer from 1 to {MAX_ATTEMPTS}, got {_short(value)}"
        )
    return value


def check_priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value not in PRIORITY_RANGE:
        raise InvalidTaskError(f"priority must be an integer from 0 to 9, got {_short(value)}")
    return value


def check_optional_seconds(value: object, what: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | timedelta):
        raise InvalidTaskError(f"{what} must be a number of seconds, got {_short(value)}")
    if isinstance(value, int) and not 0 <= value <= MAX_SECONDS:  # before float(): 10**400
        raise InvalidTaskError(
            f"{what} must be from 0 to {MAX_SECONDS:.0f} seconds (10 years), got {_short(value)}"
        )
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_SECONDS:
        raise InvalidTaskError(
            f"{what} must be from 0 to {MAX_SECONDS:.0f} seconds (10 years), got {_short(value)}"
        )
    return seconds


def resolve_due(run_at: object, delay: object) -> tuple[datetime | None, float]:
    """``(run_at, delay_s)``: an explicit due time, or a delay from the database's clock."""
    if run_at is not None and delay is not None:
        raise InvalidTaskError("give run_at or delay, not both")
    if run_at is not None:
        if not isinstance(run_at, datetime) or run_at.utcoffset() is None:
            raise InvalidTaskError(
                f"run_at must be a timezone-aware datetime, got {_short(run_at)}"
            )
        return run_at, 0.0
    return None, check_optional_seconds(delay, "delay") or 0.0


def check_key(value: object, what: str) -> str | None:
    """A business key or an ordering key: None, or up to 512 characters of text."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or len(value) > MAX_BUSINESS_KEY:
        raise InvalidTaskError(
            f"{what} must be a non-empty string of at most {MAX_BUSINESS_KEY} characters, "
            f"got {_short(value)}"
        )
    return check_text(value, what)


def check_business_key(value: object) -> str | None:
    return check_key(value, "business_key")


def check_flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidTaskError(f"{what} must be True or False, got {_short(value)}")
    return value


def check_retry(value: object) -> RetryPolicy:
    """A retry policy from what the caller gave; anything unusable is refused."""
    try:
        policy = RetryPolicy.coerce(value)  # type: ignore[arg-type]
    except InvalidTaskError:
        raise
    except (TypeError, ValueError, OverflowError, RecursionError, AttributeError) as exc:
        raise InvalidRetryPolicyError(f"retry: cannot use {_short(value)}: {exc}") from None
    if len(policy.delays) > MAX_RETRY_SCHEDULE:
        raise InvalidRetryPolicyError(
            f"retry: a schedule has at most {MAX_RETRY_SCHEDULE} entries, got {len(policy.delays)}"
        )
    return policy


def check_int_option(value: object, what: str, minimum: int = 0, maximum: int = 2**63 - 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidTaskError(
            f"{what} must be an integer from {minimum} to {maximum}, got {_short(value)}"
        )
    return value


#: Tags: at most this many per task, each at most this many characters.
MAX_TAGS = 32
MAX_TAG_LENGTH = 64


def check_tags(value: object) -> list[str] | None:
    """Tags: None, or a list (or tuple, set) of short strings without commas.

    A tag is 1 to :data:`MAX_TAG_LENGTH` characters of text, no comma (the CLI's and
    the dashboard's lists are comma-separated) and no NUL; at most :data:`MAX_TAGS`;
    duplicates are dropped, the order kept. An empty list is stored as no tags."""
    if value is None:
        return None
    if isinstance(value, str | bytes) or not isinstance(value, list | tuple | set | frozenset):
        raise InvalidTaskError(f"tags must be a list of strings, got {_short(value)}")
    tags = list(dict.fromkeys(value))
    if len(tags) > MAX_TAGS:
        raise InvalidTaskError(f"tags: at most {MAX_TAGS} tags, got {len(tags)}")
    for tag in tags:
        check_tag(tag, "tags")
    return tags or None


def check_tag(tag: object, what: str) -> str:
    """One tag (see :func:`check_tags`)."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH:
        raise InvalidTaskError(
            f"{what}: each tag must be a non-empty string of at most {MAX_TAG_LENGTH} "
            f"characters, got {_short(tag)}"
        )
    if "," in tag:
        raise InvalidTaskError(f"{what}: a tag may not contain a comma, got {_short(tag)}")
    if tag != tag.strip():
        raise InvalidTaskError(
            f"{what}: a tag may not start or end with whitespace, got {_short(tag)}"
        )
    return check_text(tag, what)


def resolve_expiry(
    expires: object, run_at: datetime | None, delay_s: float
) -> tuple[datetime | None, float | None]:
    """``(expires_at, expires_s)``: an absolute expiry, or seconds from the database's
    clock at the insert (None, None: the task never expires).

    Refused: a type other than seconds (``int``, ``float``, ``timedelta``) or an aware
    ``datetime``; zero or negative seconds; a datetime already past (on this
    process's clock); an expiry at or before the task is due (it could never run)."""
    if expires is None:
        return None, None
    if isinstance(expires, datetime):
        if expires.utcoffset() is None:
            raise InvalidTaskError(
                f"expires must be seconds or a timezone-aware datetime, got {_short(expires)}"
            )
        now = datetime.now(expires.tzinfo)
        if expires <= now:
            raise InvalidTaskError(f"expires is in the past: {expires.isoformat()}")
        due = run_at if run_at is not None else now + timedelta(seconds=delay_s)
        if expires <= due:
            raise InvalidTaskError(
                f"expires ({expires.isoformat()}) is not after the task is due "
                f"({due.isoformat()}): it could never run"
            )
        return expires, None
    seconds = check_optional_seconds(expires, "expires")
    assert seconds is not None
    if seconds <= 0:
        raise InvalidTaskError(f"expires must be more than 0 seconds, got {_short(expires)}")
    if run_at is not None:
        if run_at >= datetime.now(run_at.tzinfo) + timedelta(seconds=seconds):
            raise InvalidTaskError(
                f"expires ({seconds:g} s from now) is not after run_at ({run_at.isoformat()}): "
                "it could never run"
            )
    elif seconds <= delay_s:
        raise InvalidTaskError(
            f"expires ({seconds:g} s) is not after delay ({delay_s:g} s): it could never run"
        )
    return None, seconds
