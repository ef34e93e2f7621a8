"""Retention: keep history small, one status at a time, by dropping whole days.

History is partitioned by terminal status and, under each, by the UTC day a
task finished (migration 0004), with a default partition at each level. Two
callers share the work here:

- :meth:`Retention.run_once`, the **upkeep pass** the reconciler runs after its
  locked steps: it creates the day partitions for today and the next
  ``lookahead_days`` (so ``finish`` never lands in a default partition), drops
  every day partition that has wholly expired (a catalog change: milliseconds,
  whatever the day's size), and deletes, in batches, expired rows left in a
  default partition. It never deletes row by row inside a day partition: a
  day still partly within retention waits until all of it has expired, so a
  task is kept at least its status's retention and at most one day more.
- :meth:`Retention.purge`, what ``ledgerq purge`` runs: the same drops, then
  batches of deletes down to the exact cutoff (the boundary day and the
  default partition), reporting progress after each step.

Both then prune the dependency edges (``after=``, migration 0022) of tasks that
ended before the oldest of the three statuses' cutoffs, in batches, when every
status has one: by then the dependent is purged whatever it ended as. A status
kept forever (or left out of a purge) keeps every edge.

Races. Every step is one autocommit statement: a drop holds its status's lock
for milliseconds and gives up after 2 s of waiting (a long query on that
status's history holds it; counted as ``busy``, tried again next pass); a batch
deletes at most ``batch_size`` rows. Two passes at once (two reconcilers, or a
purge during a pass) are harmless: creating or dropping a day that another one
just created or dropped does nothing. ``finish`` inserts with ``now()``, into
today's partition, never into a day being dropped. Cutoffs come from the
database's clock.

Shaped like the reconciler: :class:`RetentionConfig` validates its defaults and
:meth:`Retention.run_once` does one pass and returns :class:`RetentionCounts`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from datetime import time as clock
from typing import Any

from ledgerq.core.errors import TransientStorageError
from ledgerq.ledger.protocol import RetentionLedger

log = logging.getLogger("ledgerq.retention")

#: The statuses history holds, each with its own partitions and retention.
TERMINAL = ("succeeded", "dead", "cancelled")
#: Defaults of ``LEDGERQ_RETENTION_<STATUS>_DAYS``.
DEFAULT_KEEP = {
    "succeeded": timedelta(days=7),
    "dead": timedelta(days=90),
    "cancelled": timedelta(days=30),
}

#: Called with the number of tasks removed by the step just done.
Progress = Callable[[int], None]


def _ignore(_: int) -> None:
    return None


def day_start(day: date) -> datetime:
    """Midnight UTC opening ``day`` (where its partition begins)."""
    return datetime.combine(day, clock(), tzinfo=UTC)


@dataclass(frozen=True)
class RetentionConfig:
    #: How long each terminal status is kept after it finished; a status missing
    #: here is kept forever.
    keep: Mapping[str, timedelta] = field(default_factory=lambda: dict(DEFAULT_KEEP))
    #: Days of partitions created ahead of today.
    lookahead_days: int = 3
    #: Rows per delete statement.
    batch_size: int = 5000

    def __post_init__(self) -> None:
        for status, kept in self.keep.items():
            if status not in TERMINAL:
                raise ValueError(f"retention for {status!r}: not one of {', '.join(TERMINAL)}")
            if kept <= timedelta(0):
                raise ValueError(f"retention for {status!r} must be positive, got {kept}")
        if not 1 <= self.lookahead_days <= 60:
            raise ValueError(f"lookahead_days must be 1..60, got {self.lookahead_days}")
        if not 1 <= self.batch_size <= 100_000:
            raise ValueError(f"batch_size must be 1..100000, got {self.batch_size}")

    @classmethod
    def from_days(cls, days: Mapping[str, float], **options: Any) -> RetentionConfig:
        """From days per status (the settings), where 0 means kept forever."""
        keep = {s: timedelta(days=d) for s, d in days.items() if d > 0}
        return cls(keep=keep, **options)


@dataclass
class RetentionCounts:
    created: int = 0
    dropped: int = 0
    #: Tasks removed by dropping whole days, and by deleting in batches.
    dropped_rows: int = 0
    deleted_rows: int = 0
    #: Rows a created day took from its default partition.
    moved_rows: int = 0
    #: Drops that did not get their lock within 2 s (tried again next pass).
    busy: int = 0
    #: Dependency edges (``after=``) of purged tasks deleted.
    edges_pruned: int = 0
    elapsed_s: float = 0.0
    by_status: dict[str, int] = field(default_factory=dict)

    @property
    def removed(self) -> int:
        return self.dropped_rows + self.deleted_rows

    def count_removed(self, status: str, n: int, progress: Progress) -> None:
        if n:
            self.by_status[status] = self.by_status.get(status, 0) + n
            progress(n)

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["removed"] = self.removed
        data["elapsed_s"] = round(self.elapsed_s, 4)
        return data

    def line(self) -> str:
        return (
            f"retention: removed {self.removed} finished tasks ({self.dropped} day partitions "
            f"dropped holding {self.dropped_rows}, {self.deleted_rows} deleted in batches), "
            f"created {self.created} day partitions, {self.busy} busy, "
            f"in {self.elapsed_s * 1000:.0f} ms"
        )


@dataclass
class Retention:
    ledger: RetentionLedger
    config: RetentionConfig = field(default_factory=RetentionConfig)

    async def cutoffs(
        self, older_than: timedelta | None = None, statuses: tuple[str, ...] = TERMINAL
    ) -> dict[str, datetime]:
        """Each status's cutoff on the database's clock: ``older_than`` for every
        status given, else each one's configured retention (kept-forever ones left out)."""
        now = await self.ledger.database_now()
        keep = {s: older_than for s in statuses} if older_than else self.config.keep
        return {s: now - kept for s, kept in keep.items() if s in statuses and kept is not None}

    async def run_once(self) -> RetentionCounts:
        """The upkeep pass: upcoming days created, expired days dropped, expired rows
        in default partitions deleted (see the module docstring)."""
        started = time.perf_counter()
        counts = RetentionCounts()
        today = (await self.ledger.database_now()).astimezone(UTC).date()
        existing = {(d.status, d.day) for d in await self.ledger.history_days()}
        for status in TERMINAL:
            for ahead in range(self.config.lookahead_days + 1):
                day = today + timedelta(days=ahead)
                if (status, day) in existing:
                    continue
                moved = await self.ledger.add_history_day(status, day)
                if moved is not None:
                    counts.created += 1
                    counts.moved_rows += moved
        cutoffs = await self.cutoffs()
        await self._drop_expired_days(cutoffs, counts, _ignore)
        # Only whole days: what is left before the boundary day's start lives in a
        # default partition (or in a day whose drop was busy).
        floors = {s: day_start(c.astimezone(UTC).date()) for s, c in cutoffs.items()}
        await self._delete_batches(floors, counts, _ignore)
        await self._prune_edges(floors, counts)
        counts.elapsed_s = time.perf_counter() - started
        return counts

    async def purge(
        self, cutoffs: Mapping[str, datetime], progress: Progress = _ignore
    ) -> RetentionCounts:
        """Remove every task of each status finished before its cutoff: whole days
        dropped, the rest deleted in batches; ``progress`` hears after each step."""
        started = time.perf_counter()
        counts = RetentionCounts()
        await self._drop_expired_days(cutoffs, counts, progress)
        await self._delete_batches(cutoffs, counts, progress)
        await self._prune_edges(cutoffs, counts)
        counts.elapsed_s = time.perf_counter() - started
        return counts

    async def _drop_expired_days(
        self, cutoffs: Mapping[str, datetime], counts: RetentionCounts, progress: Progress
    ) -> None:
        for partition in await self.ledger.history_days():
            cutoff = cutoffs.get(partition.status)
            if cutoff is None or day_start(partition.day + timedelta(days=1)) > cutoff:
                continue
            try:
                dropped = await self.ledger.drop_history_day(partition.status, partition.day)
            except TransientStorageError as exc:
                counts.busy += 1
                log.warning("history of %s: %s (tried again next pass)", partition, exc)
                continue
            if dropped is not None:
                counts.dropped += 1
                counts.dropped_rows += dropped
                counts.count_removed(partition.status, dropped, progress)

    async def _delete_batches(
        self, befores: Mapping[str, datetime], counts: RetentionCounts, progress: Progress
    ) -> None:
        limit = self.config.batch_size
        for status, before in befores.items():
            while True:
                deleted = await self.ledger.purge_history_batch(status, before, limit)
                counts.deleted_rows += deleted
                counts.count_removed(status, deleted, progress)
                if deleted < limit:
                    break

    async def _prune_edges(self, befores: Mapping[str, datetime], counts: RetentionCounts) -> None:
        """The dependency edges of tasks that ended before every status's cutoff, a
        batch at a time; none unless all three statuses have one."""
        if set(befores) != set(TERMINAL):
            return
        before, limit = min(befores.values()), self.config.batch_size
        while True:
            pruned = await self.ledger.prune_dependencies(before, limit)
            counts.edges_pruned += pruned
            if pruned < limit:
                break
