"""The typed results of :mod:`ledgerq.admin`: frozen dataclasses, each with
``to_json()`` giving what the CLI prints for ``--json``.

Times are timezone-aware ``datetime`` values (UTC, as the ledger stores them);
a column is read as a time because its field is typed ``datetime`` (or
``datetime | None``), and ``to_json()`` writes it back as ISO 8601. A task's
columns that this version does not name (added by a later migration) are kept
in ``extra`` and printed by ``to_json()`` too, so no column is lost. The results of actions are the
seam's own values, re-exported: :class:`~ledgerq.ledger.actions.Report`,
:class:`~ledgerq.ledger.keys.KeyRelease`,
:class:`~ledgerq.ledger.scheduling.PauseReport`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, TypeVar, get_args, get_type_hints

R = TypeVar("R", bound="_Row")


def _time(value: Any) -> Any:
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _json(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


#: Each row class's time columns, worked out on its first row.
_TIME_COLUMNS: dict[type[Any], frozenset[str]] = {}


def _time_columns(cls: type[Any]) -> frozenset[str]:
    """The fields of ``cls`` typed ``datetime`` or ``datetime | None``: the columns
    read from ISO 8601."""
    times = _TIME_COLUMNS.get(cls)
    if times is None:
        hints = get_type_hints(cls)
        times = _TIME_COLUMNS[cls] = frozenset(
            f.name for f in fields(cls) if datetime in (hints[f.name], *get_args(hints[f.name]))
        )
    return times


@dataclass(frozen=True)
class _Row:
    """A row read from the seam: named columns typed, the rest in ``extra``."""

    extra: Mapping[str, Any] = field(default_factory=dict, kw_only=True)

    @classmethod
    def from_row(cls: type[R], row: Mapping[str, Any]) -> R:
        names = {f.name for f in fields(cls)} - {"extra"}
        times = _time_columns(cls)
        known = {k: (_time(v) if k in times else v) for k, v in row.items() if k in names}
        return cls(**known, extra={k: v for k, v in row.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        data = {f.name: _json(getattr(self, f.name)) for f in fields(self) if f.name != "extra"}
        return {**data, **self.extra}


@dataclass(frozen=True)
class TaskRow(_Row):
    """One task of :func:`~ledgerq.admin.list_tasks` (``ledgerq tasks list``)."""

    id: int
    kind: str
    queue: str
    status: str
    attempts: int
    #: None: left unset by the producer until the first claim fills in the kind's.
    max_attempts: int | None
    priority: int
    run_at: datetime | None
    created_at: datetime | None
    finished_at: datetime | None = None
    business_key: str | None = None
    last_error: str | None = None
    epoch: int = 0
    result: Any = None
    progress: Any = None
    #: ``live`` (the hot table) or ``history``.
    location: str = "live"
    tags: list[str] | None = None
    expires_at: datetime | None = None
    #: Whether it ended ``cancelled`` because it was not started by ``expires_at``.
    expired: bool = False


@dataclass(frozen=True)
class AttemptEntry(_Row):
    """One ended attempt of a task: its worker, its times, how it ended."""

    attempt: int | None = None
    worker: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None
    outcome: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class TaskAuditEntry(_Row):
    """An operator action that touched one task."""

    id: int
    at: datetime
    actor: str
    action: str
    reason: str | None = None
    outcome: str | None = None


@dataclass(frozen=True)
class TaskDetail(_Row):
    """One task with every column (:func:`~ledgerq.admin.show`, ``ledgerq show``)."""

    id: int
    kind: str
    queue: str
    status: str
    payload: Any
    attempts: int
    #: None: left unset by the producer until the first claim fills in the kind's.
    max_attempts: int | None
    priority: int
    epoch: int
    run_at: datetime | None
    created_at: datetime | None
    location: str
    business_key: str | None = None
    shard: int | None = None
    retry: Any = None
    worker: str | None = None
    last_error: str | None = None
    result: Any = None
    checkpoint: Any = None
    progress: Any = None
    timeout_s: float | None = None
    parent_id: int | None = None
    route: str | None = None
    published_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    cancel_requested_at: datetime | None = None
    tags: list[str] | None = None
    expires_at: datetime | None = None
    #: Whether it ended ``cancelled`` because it was not started by ``expires_at``.
    expired: bool = False
    #: A retry held for this worker (``@task(sticky_retry=...)``) until ``sticky_until``.
    sticky_worker: str | None = None
    sticky_until: datetime | None = None
    attempt_log: tuple[AttemptEntry, ...] = ()
    audit: tuple[TaskAuditEntry, ...] = ()
    children: Any = None

    @classmethod
    def read(cls, row: Mapping[str, Any]) -> TaskDetail:
        return cls.from_row(
            {
                **row,
                "attempt_log": tuple(AttemptEntry.from_row(a) for a in row["attempt_log"] or ()),
                "audit": tuple(TaskAuditEntry.from_row(a) for a in row["audit"] or ()),
            }
        )

    def to_json(self) -> dict[str, Any]:
        data = super().to_json()
        data["attempt_log"] = [a.to_json() for a in self.attempt_log]
        data["audit"] = [a.to_json() for a in self.audit]
        return data


@dataclass(frozen=True)
class AuditRecord(_Row):
    """One operator action (:func:`~ledgerq.admin.audit`, ``ledgerq tasks audit``)."""

    id: int
    at: datetime
    actor: str
    action: str
    selection: Mapping[str, Any]
    options: Mapping[str, Any]
    reason: str | None
    matched: int
    changed: int
    skipped: int
    finished_at: datetime | None = None


@dataclass(frozen=True)
class Pause(_Row):
    """A pause in force (:func:`~ledgerq.admin.pauses`)."""

    scope: str
    name: str
    paused_at: datetime
    actor: str
    reason: str | None = None


@dataclass(frozen=True)
class KindState(_Row):
    """A kind with a rate limit, a pause or ordering ``block`` (``ledgerq kinds list``)."""

    kind: str
    rate_per_s: float | None
    burst: float | None
    paused: bool
    #: What a dead task does to its ordering key: ``block`` or ``release``.
    ordering: str
    #: How many of its tasks are pending.
    pending: int


@dataclass(frozen=True)
class RateLimitChange:
    """What :func:`~ledgerq.admin.set_rate_limit` set (None: the limit was lifted)."""

    kind: str
    rate_per_s: float | None
    burst: float | None

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "rate_per_s": self.rate_per_s, "burst": self.burst}
