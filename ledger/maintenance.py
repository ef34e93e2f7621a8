"""The reconciler's storage seam (synchronous: the reconciler is a short cron job).

Like :mod:`ledger.store`, every operation is one named statement, every state
change a compare-and-set that returns what it won, and reads page by id (keyset
pagination) so a large ledger is never read in one giant query.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from sqlalchemy import Connection, Engine

from ledger.retry import RetryPolicy
from ledger.sql import Q
from ledger.store import DueTask, FailOutcome, Failure, fail_params, fence_params


@dataclass(frozen=True, slots=True)
class ExpiredLease:
    id: int
    epoch: int
    kind: str
    attempts: int
    max_attempts: int
    retry: dict[str, object] | None
    worker: str | None

    def failure(self) -> Failure:
        delay = RetryPolicy.from_json(self.retry).delay_for(self.attempts)
        error = (
            f"lease expired: worker {self.worker} stopped heartbeating (attempt {self.attempts})"
        )
        return Failure(self.id, self.epoch, error, delay=delay)


class SyncPublishBatch:
    """Rows locked by the reconciler's open transaction while it re-publishes them."""

    def __init__(self, conn: Connection, rows: list[DueTask]) -> None:
        self._conn = conn
        self.rows = rows

    def mark_published(self, rows: Sequence[DueTask]) -> set[int]:
        if not rows:
            return set()
        result = self._conn.execute(Q.touch_published, fence_params((r.id, r.epoch) for r in rows))
        return {int(r[0]) for r in result}


def _due(rows: Iterator[object]) -> list[DueTask]:
    return [DueTask(r.id, r.kind, r.queue, r.priority, r.epoch) for r in rows]  # type: ignore[attr-defined]


class MaintenanceLedger:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    @contextmanager
    def exclusive(self) -> Iterator[bool]:
        """Hold the reconciler's advisory lock for the block; yield whether we got it."""
        with self.engine.connect() as conn:
            got = bool(conn.execute(Q.try_reconciler_lock).scalar())
            conn.commit()
            try:
                yield got
            finally:
                if got:
                    conn.execute(Q.release_reconciler_lock)
                    conn.commit()

    @contextmanager
    def stalled(
        self, after: int, limit: int, default_stall_s: float, stalls: Mapping[str, float]
    ) -> Iterator[SyncPublishBatch]:
        """Lock a page of stalled ``published`` rows (id > ``after``) for re-publishing."""
        params = {
            "after": after,
            "limit": limit,
            "default_stall_s": default_stall_s,
            "min_stall_s": min([default_stall_s, *stalls.values()]),
            "queues": list(stalls),
            "stalls": [float(v) for v in stalls.values()],
        }
        with self.engine.begin() as conn:
            yield SyncPublishBatch(conn, _due(iter(conn.execute(Q.select_stalled, params))))

    @contextmanager
    def overdue(self, after: int, limit: int, default_stall_s: float) -> Iterator[SyncPublishBatch]:
        """Lock a page of ``pending`` rows overdue by more than the stall window."""
        params = {"after": after, "limit": limit, "default_stall_s": default_stall_s}
        with self.engine.begin() as conn:
            yield SyncPublishBatch(conn, _due(iter(conn.execute(Q.select_overdue, params))))

    def expire_leases(self, after: int, limit: int) -> tuple[list[FailOutcome], int | None]:
        """Fail one page of expired leases (retry or dead); return outcomes and the last id."""
        with self.engine.begin() as conn:
            expired = [
                ExpiredLease(r.id, r.epoch, r.kind, r.attempts, r.max_attempts, r.retry, r.worker)
                for r in conn.execute(Q.select_expired, {"after": after, "limit": limit})
            ]
            if not expired:
                return [], None
            result = conn.execute(Q.fail, fail_params([e.failure() for e in expired]))
            outcomes = [
                FailOutcome(r.id, r.kind, r.attempts, r.last_error, r.status) for r in result
            ]
            return outcomes, expired[-1].id

    def count_expired(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(Q.count_expired).scalar_one())
