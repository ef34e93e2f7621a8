"""The typed results of :mod:`ledgerq.admin`'s overview, purge and config
functions (the task-level ones are in :mod:`ledgerq.admin.results`).

``to_json()`` of each gives exactly what the matching CLI command prints with
``--json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ledgerq.admin.results import _Row


@dataclass(frozen=True)
class Unserved(_Row):
    """Due tasks of one queue, kind and shard that no live worker serves."""

    queue: str
    kind: str
    shard: int
    tasks: int
    oldest: datetime


@dataclass(frozen=True)
class LiveWorker:
    """A live worker's subscription: what it serves (None: every kind or shard)."""

    worker: str
    queue: str
    kinds: tuple[str, ...] | None
    shards: tuple[int, ...] | None
    #: ``--shards auto``: its shards are its pool's split.
    auto: bool
    since: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "worker": self.worker,
            "queue": self.queue,
            "kinds": None if self.kinds is None else list(self.kinds),
            "shards": None if self.shards is None else list(self.shards),
            "auto": self.auto,
            "since": self.since.isoformat(),
        }


@dataclass(frozen=True)
class Window(_Row):
    """A live broker route's window: what the relay may still publish to it."""

    queue: str
    route: str
    capacity: int
    published: int
    room: int


@dataclass(frozen=True)
class Stats:
    """:func:`~ledgerq.admin.stats` (``ledgerq stats``): counts by status and by
    kind (live and history), the unserved backlog, the live workers, the windows."""

    total: int
    by_status: Mapping[str, int]
    by_kind: Mapping[str, Mapping[str, int]]
    unserved: tuple[Unserved, ...]
    workers: tuple[LiveWorker, ...]
    windows: tuple[Window, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_status": dict(self.by_status),
            "by_kind": {kind: dict(counts) for kind, counts in self.by_kind.items()},
            "unserved": [row.to_json() for row in self.unserved],
            "workers": [row.to_json() for row in self.workers],
            "windows": [row.to_json() for row in self.windows],
        }


@dataclass(frozen=True)
class PurgeResult:
    """:func:`~ledgerq.admin.purge` (``ledgerq purge``): the cutoff of each status,
    how many tasks matched, and (not in a dry run) what was removed and how."""

    dry_run: bool
    cutoffs: Mapping[str, datetime]
    matched: Mapping[str, int]
    #: Removed: ``dropped_rows`` by dropping ``dropped`` whole day partitions,
    #: ``deleted_rows`` in batches (all 0 in a dry run).
    removed: int = 0
    dropped: int = 0
    dropped_rows: int = 0
    deleted_rows: int = 0
    #: Everything retention counted (``RetentionCounts.as_dict()``), None in a dry run.
    counts: Mapping[str, Any] | None = None
    elapsed: timedelta | None = None

    @property
    def total(self) -> int:
        return sum(self.matched.values())

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dry_run": self.dry_run,
            "cutoffs": {s: c.isoformat() for s, c in self.cutoffs.items()},
            "matched": dict(self.matched),
            "total": self.total,
        }
        if self.counts is not None:
            data.update(self.counts)
        if self.elapsed is not None:
            data["elapsed_s"] = round(self.elapsed.total_seconds(), 3)
        return data


@dataclass(frozen=True)
class ConfigEntry:
    """One effective setting (:func:`~ledgerq.admin.config`, ``ledgerq config``)."""

    field: str
    #: The value, URLs with their passwords masked.
    value: Any
    #: ``default``, or what set it (an environment variable, a flag).
    source: str
    env: str
    flag: str | None

    def to_json(self) -> dict[str, Any]:
        return {"value": self.value, "source": self.source, "env": self.env, "flag": self.flag}
