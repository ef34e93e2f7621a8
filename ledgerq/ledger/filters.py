"""Which tasks an operator means: :class:`TaskFilter`, and the times it is given in.

One filter serves ``ledgerq tasks list`` and every action (``cancel``, ``retry``,
...), in the CLI and in Python; ``show`` names one task by its id or its
business key (:func:`task_to_find`). Criteria combine with AND; an empty criterion
matches everything. Live and finished tasks are searched together, newest
(highest id) first; ``before`` pages: the next page is ``before=<last id shown>``
(keyset paging, so a page costs the same deep into a large history).

Times are ISO 8601 (``2026-11-23T14:00:00+00:00``, ``2026-11-23``; without an
offset they are UTC) or relative to now: ``90s``, ``30m``, ``2h``, ``7d``, ``2w``
(for ``--since``/``--until``: that long ago; for ``reschedule --in``: that long
from now). Anything else is :class:`~ledgerq.core.errors.InvalidFilterError`
with one line that says what is accepted.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Row, TextClause

from ledgerq.core.errors import InvalidFilterError, InvalidTaskError, TaskNotFoundError
from ledgerq.ledger.states import Status
from ledgerq.ledger.validation import check_tag

#: Rows ``list`` returns when no limit is given.
DEFAULT_LIMIT = 50
MAX_LIMIT = 100_000
MAX_BIGINT = 2**63 - 1

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
STATUSES = tuple(s.value for s in Status)


def parse_duration(text: str, what: str = "duration") -> timedelta:
    """``30m`` -> 30 minutes (units s, m, h, d, w)."""
    match = _DURATION.match(text)
    if match is None:
        raise InvalidFilterError(
            f"{what}: cannot read {text!r}; give a number and a unit: 90s, 30m, 2h, 7d, 2w"
        )
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


def parse_time(text: str, what: str, *, now: datetime | None = None, ago: bool = True) -> datetime:
    """An absolute time from ISO 8601 or a duration (``ago``: before now, else after)."""
    now = now or datetime.now(UTC)
    if _DURATION.match(text):
        delta = parse_duration(text, what)
        return now - delta if ago else now + delta
    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidFilterError(
            f"{what}: cannot read {text!r} as a time; give ISO 8601 "
            "(2026-11-23T14:00:00+00:00, 2026-11-23) or a relative 30m, 2h, 7d"
        ) from None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def check_statuses(values: Iterable[str]) -> tuple[str, ...]:
    statuses = tuple(dict.fromkeys(v.strip().lower() for v in values))
    for status in statuses:
        if status not in STATUSES:
            raise InvalidFilterError(
                f"unknown status {status!r}; the statuses are {', '.join(STATUSES)}"
            )
    return statuses


def _check_id(value: object, what: str) -> int:
    if type(value) is not int or not 1 <= value <= MAX_BIGINT:
        raise InvalidFilterError(f"{what} must be a positive task id, got {value!r}")
    return value


def _check_tags(values: object) -> tuple[str, ...]:
    if isinstance(values, str) or not isinstance(values, list | tuple):
        raise InvalidFilterError(f"tags must be a list of tags, got {values!r}")
    try:
        return tuple(dict.fromkeys(check_tag(t, "tag") for t in values))
    except InvalidTaskError as exc:
        raise InvalidFilterError(str(exc)) from None


@dataclass(frozen=True)
class TaskFilter:
    """Tasks by status, kind, queue, business key, creation time, error text, id or tags.
    Construction validates every field (:class:`InvalidFilterError`)."""

    statuses: tuple[str, ...] = ()
    kind: str | None = None
    queue: str | None = None
    business_key: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    #: A substring of ``last_error`` (case-insensitive).
    error: str | None = None
    ids: tuple[int, ...] = ()
    #: Tasks carrying every one of these tags.
    tags: tuple[str, ...] = ()
    #: At most this many tasks (``None``: list shows :data:`DEFAULT_LIMIT`, an
    #: action takes every match).
    limit: int | None = None
    #: Only ids below this one (the next page).
    before: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "statuses", check_statuses(self.statuses))
        object.__setattr__(self, "ids", tuple(_check_id(i, "an id") for i in self.ids))
        object.__setattr__(self, "tags", _check_tags(self.tags))
        if self.limit is not None and not (
            type(self.limit) is int and 1 <= self.limit <= MAX_LIMIT
        ):
            raise InvalidFilterError(f"limit must be 1..{MAX_LIMIT}, got {self.limit!r}")
        if self.before is not None:
            _check_id(self.before, "before")
        for name in ("since", "until"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
                raise InvalidFilterError(f"{name} must be a datetime with a time zone")
        for name in ("kind", "queue", "business_key", "error"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value or "\0" in value):
                raise InvalidFilterError(f"{name} must be a non-empty string, got {value!r}")

    @classmethod
    def parse(
        cls,
        *,
        statuses: Iterable[str] = (),
        since: str | None = None,
        until: str | None = None,
        now: datetime | None = None,
        **fields: Any,
    ) -> TaskFilter:
        """From the CLI's text: ``since``/``until`` as ISO 8601 or ``30m``."""
        return cls(
            statuses=tuple(statuses),
            since=None if since is None else parse_time(since, "--since", now=now),
            until=None if until is None else parse_time(until, "--until", now=now),
            **fields,
        )

    @property
    def selects_anything(self) -> bool:
        """Whether any criterion is set (an action refuses a filter that has none)."""
        return any(v not in (None, ()) for k, v in asdict(self).items() if k != "limit")

    def describe(self) -> dict[str, Any]:
        """The criteria set, as JSON (for the audit record)."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if value in (None, ()):
                continue
            out[key] = value.isoformat() if isinstance(value, datetime) else value
        return out

    def params(self, limit: int, before: int | None = None) -> dict[str, Any]:
        """The bound parameters of ``list_tasks`` (``before`` overrides the filter's):
        those of the one SQL filter, ``task_filter`` in ``fragments.sql``, which every
        branch of the listing (and so every action's pages) applies."""
        cursor = before if before is not None else self.before
        return {
            "statuses": list(self.statuses or STATUSES),
            "kind": self.kind,
            "queue": self.queue,
            "business_key": self.business_key,
            "since": self.since,
            "until": self.until,
            "error": self.error,
            "ids": list(self.ids) if self.ids else None,
            "tags": list(self.tags) if self.tags else None,
            "before": cursor if cursor is not None else MAX_BIGINT,
            "limit": limit,
        }


#: A ledger's ``list_tasks``: the rows a filter matches, newest first.
ListTasks = Callable[[TaskFilter], Awaitable[list[dict[str, Any]]]]


async def task_to_find(task_id: int | None, business_key: str | None, list_tasks: ListTasks) -> int:
    """The id ``find`` shows (one database's ledger): ``task_id`` if given, else that
    of the newest task (highest id, live or finished) with ``business_key``, read by
    ``list_tasks``. Naming neither, or a key no task has, is
    :class:`~ledgerq.core.errors.TaskNotFoundError`."""
    if task_id is not None:
        return task_id
    if business_key is None:
        raise TaskNotFoundError("name a task id or a business key")
    newest = await list_tasks(TaskFilter(business_key=business_key, limit=1))
    if not newest:
        raise TaskNotFoundError(f"no task with business key {business_key!r}")
    return int(newest[0]["id"])


#: A ledger's one-statement read (``_rows``): its rows.
ReadRows = Callable[[TextClause, Mapping[str, Any]], Awaitable[Sequence[Row[Any]]]]


async def found_task(
    task_id: int | None,
    business_key: str | None,
    list_tasks: ListTasks,
    rows: ReadRows,
    show_task: TextClause,
    shown: Callable[[Row[Any]], dict[str, Any]],
) -> tuple[int, dict[str, Any]]:
    """What ``find`` starts from (one database's ledger): the id (:func:`task_to_find`)
    and the task, its ``show_task`` row as ``shown`` makes it JSON, ``attempt_log``
    a list. No such task is :class:`~ledgerq.core.errors.TaskNotFoundError`."""
    task_id = await task_to_find(task_id, business_key, list_tasks)
    found = await rows(show_task, {"id": task_id})
    if not found:
        raise TaskNotFoundError(f"no task with id {task_id}")
    task = shown(found[0])
    task["attempt_log"] = task.get("attempt_log") or []
    return task_id, task


def audit_params(limit: int, before: int | None) -> dict[str, Any]:
    """``list_audit``'s parameters: ``limit`` records, newest first, below id ``before``."""
    return {"limit": limit, "before": before if before is not None else MAX_BIGINT}
