"""The reconciler's broker duties on MySQL / MariaDB (the rest of
:class:`~ledgerq.ledger.protocol.ReconcilerLedger`; the rescue is
:mod:`.rescue`'s): the stalled deliveries published again, the overdue pending
rows published in a relay's stead, what was published to a route no live
worker serves taken back. Statements in ``reconcile.sql`` and ``relay.sql``.

Each runs under the reconciler's lock (``exclusive``: one reconciler at a
time) in a transaction of its own, in READ COMMITTED, the relay's way
(:mod:`.relay`): candidates read with a plain read, then locked by primary key
with ``FOR UPDATE SKIP LOCKED`` and their conditions re-checked on the latest
version, then written by id, fenced on (id, epoch, status).

- ``stalled_batch`` and ``overdue_batch`` hold their rows for the caller's
  block, as ``publish_batch`` does; the reconciler marks them published after
  the broker confirmed (``mark_published``, the relay's). The overdue pick is
  the relay's own (:func:`.relay.pick`, the one pick rule), for rows due the
  stall window or longer. A row a relay or a worker holds is skipped: it is on
  its way.
- ``unpublish_unserved`` moves published rows whose route lost its live
  subscribers back to pending, epoch + 1 (a message stranded in that broker
  queue claims nothing), and records it in the audit trail (actor
  ``ledgerq``) in the same transaction. A worker that claims such a row
  meanwhile has moved it on; the fence leaves it alone.
- ``expire_due`` ends queued rows past their expiry, a page at a time, as
  PostgreSQL's: cancelled and expired, audited (:func:`.expiry.expire_page`;
  a row a relay or a worker holds is skipped, and its claim ends it).
- ``release_stuck`` judges waiting tasks none of whose dependencies is live (a
  release their ends missed), in one transaction: :func:`.families.release_stuck`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.model import DueTask
from ledgerq.ledger.mysql import expiry, families, plans
from ledgerq.ledger.mysql.audit import SYSTEM_ACTOR, record_audit
from ledgerq.ledger.mysql.base import micros, translated
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.mysql.relay import MyPublishBatch, MyRelay, held, pick, take_back
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.ledger.sql import load_in_lists


@dataclass(frozen=True)
class ReconcileQueries:
    """``ledger/mysql/reconcile.sql``."""

    stalled_candidates: TextClause
    lock_stalled: TextClause
    unserved_candidates: TextClause
    lock_unserved: TextClause


CQ: ReconcileQueries = load_in_lists(
    ReconcileQueries, "ledgerq.ledger.mysql", "reconcile.sql", LIBRARY
)


def stalled(
    after: int, limit: int, default_stall_s: float, stalls: Mapping[str, float]
) -> plans.Plan[list[DueTask]]:
    """Lock a page (ids above ``after``) of published rows unclaimed past their stall
    window, whose route is still served."""
    params = {
        "after": after,
        "limit": limit,
        "default_stall_s": float(default_stall_s),
        "min_stall_us": micros(min([default_stall_s, *stalls.values()])),
        "stalls": json.dumps({queue: float(s) for queue, s in stalls.items()}),
    }
    candidates = yield CQ.stalled_candidates, params
    if not candidates.rows:
        return []
    epochs = {int(r[0]): int(r[1]) for r in candidates.rows}
    locked = yield CQ.lock_stalled, {"ids": sorted(epochs)}
    return [
        DueTask(int(i), kind, queue, int(priority), int(epoch), bool(suspect), None, route or None)
        for i, kind, queue, priority, epoch, suspect, route in locked.rows
        if epochs.get(int(i)) == int(epoch)
    ]


def unserved(limit: int) -> plans.Plan[list[tuple[int, str]]]:
    """Take back up to ``limit`` published rows no live route serves; each moved
    row's id and queue."""
    candidates = yield CQ.unserved_candidates, {"limit": limit}
    if not candidates.rows:
        return []
    epochs = {int(r[0]): int(r[1]) for r in candidates.rows}
    locked = yield CQ.lock_unserved, {"ids": sorted(epochs)}
    kept = held(epochs, locked.rows)
    return (yield from take_back([(i, epochs[i]) for i in sorted(kept)]))


class MyReconcile(MyRelay):
    def stalled_batch(
        self, after: int, limit: int, default_stall_s: float, stalls: Mapping[str, float]
    ) -> AbstractAsyncContextManager[MyPublishBatch]:
        return self._locked(stalled(after, limit, default_stall_s, stalls))

    def overdue_batch(
        self, limit: int, stall_s: float, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[MyPublishBatch]:
        return self._locked(pick(limit, aging_s, min_wait_s=stall_s))

    async def unpublish_unserved(self, limit: int) -> list[int]:
        with translated():
            async with self.engine.begin() as conn:
                run = plans.async_runner(conn, "ledgerq")
                moved = await plans.adrive(unserved(limit), run)
                if moved:
                    await record_audit(
                        conn,
                        "unpublish_unserved",
                        {"queue": sorted({queue for _, queue in moved})},
                        actor=SYSTEM_ACTOR,
                        reason="published to a route that no live worker serves any more",
                        task_ids=[task_id for task_id, _ in moved],
                    )
        return [task_id for task_id, _ in moved]

    async def expire_due(self, limit: int) -> list[int]:
        with translated():
            async with self.engine.begin() as conn:
                run = plans.async_runner(conn, "ledgerq")
                return await plans.adrive(expiry.expire_page(limit), run)

    async def release_stuck(self, limit: int) -> list[tuple[int, str]]:
        with translated():
            async with self.engine.begin() as conn:
                run = plans.async_runner(conn, "ledgerq")
                return await plans.adrive(families.release_stuck(limit), run)
