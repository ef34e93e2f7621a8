"""The operations of the relay, the worker and the reconciler, on PostgreSQL.

Each is one named statement from ``queries.sql``. The page-locking operations
(``publish_batch``, ``stalled_batch``, ``overdue_batch``) hold one transaction
open for the caller's block, so the rows stay locked while they are published;
everything else runs in autocommit.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Unpack

from sqlalchemy import TextClause

from ledgerq.ledger.model import (
    ClaimedTask,
    DueTask,
    ExpiredLease,
    Fence,
    Finished,
    Held,
    Outcome,
)
from ledgerq.ledger.options import DueOptions
from ledgerq.ledger.params import fence_params, outcome_params
from ledgerq.ledger.pg.audit import SYSTEM_ACTOR, record_audit
from ledgerq.ledger.pg.base import PgBase, translated
from ledgerq.ledger.pg.batches import PgExpiredBatch, PgPublishBatch
from ledgerq.ledger.pg.rows import claimed_tasks, due_tasks, finished_rows
from ledgerq.ledger.pg.tx import PgAsyncTx
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, aging_param
from ledgerq.ledger.specs import TaskSpec
from ledgerq.ledger.sql import AQ, DQ, UQ, Q
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES


class PgServices(PgBase):
    # -- page locks (relay and reconciler) ------------------------------------------
    @asynccontextmanager
    async def _locked(
        self, statement: TextClause, params: Mapping[str, Any]
    ) -> AsyncIterator[PgPublishBatch]:
        with translated():
            async with self.engine.begin() as conn:
                rows = due_tasks((await conn.execute(statement, params)).all())
                yield PgPublishBatch(conn, rows)

    def publish_batch(
        self, limit: int, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[PgPublishBatch]:
        return self._locked(Q.select_due, {"limit": limit, "aging_s": aging_param(aging_s)})

    async def publish_due(self, limit: int, aging_s: float = DEFAULT_AGING_S) -> list[DueTask]:
        params = {"limit": limit, "aging_s": aging_param(aging_s)}
        return due_tasks(await self._hot_rows(Q.publish_due, params))

    async def return_unpublished(self, rows: Sequence[DueTask]) -> set[int]:
        if not rows:
            return set()
        ordered = sorted(rows, key=lambda r: r.id)
        params = {"ids": [r.id for r in ordered], "epochs": [r.epoch for r in ordered]}
        with translated():
            async with self.engine.begin() as conn:
                result = await conn.execute(Q.return_unpublished, params)
                return {int(r[0]) for r in result}

    async def kind_durations(self) -> dict[str, float]:
        rows = await self._rows(Q.kind_durations, {})
        return {str(r.kind): float(r.seconds) for r in rows if r.seconds is not None}

    def stalled_batch(
        self, after: int, limit: int, default_stall_s: float, stalls: Mapping[str, float]
    ) -> AbstractAsyncContextManager[PgPublishBatch]:
        return self._locked(
            Q.select_stalled,
            {
                "after": after,
                "limit": limit,
                "default_stall_s": default_stall_s,
                "min_stall_s": min([default_stall_s, *stalls.values()]),
                "queues": list(stalls),
                "stalls": [float(v) for v in stalls.values()],
            },
        )

    def overdue_batch(
        self, limit: int, stall_s: float, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[PgPublishBatch]:
        return self._locked(
            Q.select_overdue,
            {"limit": limit, "default_stall_s": stall_s, "aging_s": aging_param(aging_s)},
        )

    async def unpublish_unserved(self, limit: int) -> list[int]:
        with translated():
            async with self.engine.begin() as conn:
                rows = list(await conn.execute(Q.unpublish_unserved, {"limit": limit}))
                if rows:
                    await record_audit(
                        conn,
                        "unpublish_unserved",
                        {"queue": sorted({str(r.queue) for r in rows})},
                        actor=SYSTEM_ACTOR,
                        reason="published to a route that no live worker serves any more",
                        task_ids=[int(r.id) for r in rows],
                    )
        return [int(r.id) for r in rows]

    async def expire_due(self, limit: int) -> list[int]:
        with translated():
            async with self.engine.begin() as conn:  # the statement writes its own audit
                rows = list(await conn.execute(Q.expire_due, {"limit": limit}))
        return [int(r.id) for r in rows]

    @asynccontextmanager
    async def exclusive(self) -> AsyncIterator[bool]:
        with translated():
            async with self.sessions.connect() as conn:  # a session: the lock outlives commits
                got = bool((await conn.execute(Q.try_reconciler_lock)).scalar())
                await conn.commit()
                try:
                    yield got
                finally:
                    if got:
                        await conn.execute(Q.release_reconciler_lock)
                        await conn.commit()

    # -- worker ---------------------------------------------------------------------
    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        params: dict[str, Any] = fence_params(fences)
        if not params["ids"]:
            return []
        params.update(worker=worker, lease_s=lease_s, max_payload_bytes=MAX_CLAIM_PAYLOAD_BYTES)
        return claimed_tasks(await self._hot_rows(Q.claim, params))

    async def claim_due(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease_s: float,
        **options: Unpack[DueOptions],
    ) -> list[ClaimedTask]:
        kinds = options.get("kinds")
        params = {
            "queues": list(queues),
            "kinds": None if kinds is None else sorted(kinds),
            "limit": limit,
            "aging_s": aging_param(options.get("aging_s", DEFAULT_AGING_S)),
            "worker": worker,
            "lease_s": lease_s,
            "max_payload_bytes": MAX_CLAIM_PAYLOAD_BYTES,
        }
        return claimed_tasks(await self._hot_rows(DQ.claim_due, params))

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        rows = await self._rows(Q.whereabouts, {"ids": sorted(set(ids))})
        return {int(r.id): str(r.status) for r in rows}

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        if not outcomes:
            return []
        return finished_rows(await self._hot_rows(Q.finish, outcome_params(outcomes)))

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        params: dict[str, Any] = fence_params(fences)
        if not params["ids"]:
            return Held()
        params["lease_s"] = lease_s
        params["progress"] = [(progress or {}).get(task_id) for task_id in params["ids"]]
        rows = await self._hot_rows(Q.heartbeat, params)
        return Held(
            (int(r.id) for r in rows if not r.busy),
            (int(r.id) for r in rows if r.cancel_requested),
            (int(r.id) for r in rows if r.busy),
        )

    async def subscribe(
        self,
        worker: str,
        subscriptions: Sequence[Subscription],
        ttl_s: float,
        *,
        direct: bool = False,
    ) -> None:
        params = {
            "worker": worker,
            "ttl_s": ttl_s,
            "queues": [s.queue for s in subscriptions],
            "kinds": [
                _array(sorted(s.kinds)) if s.kinds is not None else "" for s in subscriptions
            ],
            "shards": [
                _array(map(str, sorted(s.shards))) if s.shards is not None else ""
                for s in subscriptions
            ],
            "routes": [s.route or "" for s in subscriptions],
            "capacities": [s.capacity for s in subscriptions],
            "stickies": [s.sticky or "" for s in subscriptions],
            "direct": direct,
        }
        await self._rows(UQ.subscribe, params)

    async def unsubscribe(self, worker: str) -> None:
        await self._rows(UQ.unsubscribe, {"worker": worker})

    async def alive(self, worker: str, silence_s: float) -> None:
        await self._rows(UQ.worker_alive, {"worker": worker, "silence_s": silence_s})

    async def gone(self, worker: str) -> None:
        await self._rows(UQ.worker_gone, {"worker": worker})

    async def pool_members(self, tag: str) -> list[str]:
        return [str(r.worker) for r in await self._rows(UQ.pool_members, {"tag": tag})]

    async def subscriptions(self) -> list[dict[str, Any]]:
        """Every worker's subscription, live first (``ledgerq stats``)."""
        return [dict(r._mapping) for r in await self._rows(UQ.list_subscriptions, {})]

    async def windows(self) -> list[dict[str, Any]]:
        """Each live broker route's window: capacity, published, room."""
        return [dict(r._mapping) for r in await self._rows(UQ.list_windows, {})]

    async def unserved(self) -> list[dict[str, Any]]:
        """Due tasks of routed queues no live subscription covers, by queue, kind, shard."""
        return [dict(r._mapping) for r in await self._rows(UQ.unserved, {})]

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        params = {"id": fence[0], "epoch": fence[1], "checkpoint": json.dumps(state)}
        return bool(await self._rows(Q.save_checkpoint, params))

    # -- periodic enqueuer (consumers.periodic) ------------------------------------
    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]:
        with translated():
            async with self.engine.begin() as conn:
                return await PgAsyncTx(conn, "aenqueue_many").enqueue_many(specs)

    # -- reconciler -----------------------------------------------------------------
    async def silent_workers(self) -> dict[str, int]:
        return {str(r.worker): int(r.in_flight) for r in await self._rows(Q.silent_workers, {})}

    async def dead_workers(self) -> dict[str, int]:
        return {str(r.worker): int(r.in_flight) for r in await self._rows(Q.dead_workers, {})}

    async def lapse_dead_subscriptions(self) -> int:
        return len(await self._rows(Q.lapse_dead_subscriptions, {}))

    async def release_stuck(self, limit: int) -> list[tuple[int, str]]:
        rows = await self._rows(AQ.release_stuck, {"limit": limit})
        return [(int(r.id), str(r.outcome)) for r in rows]

    def orphaned_batch(
        self, after: int, limit: int, dead: Mapping[str, int]
    ) -> AbstractAsyncContextManager[PgExpiredBatch]:
        params = {"after": after, "limit": limit, "workers": list(dead)}
        return self._expired(Q.select_orphaned, params, dead, orphaned=True)

    def expired_batch(
        self, after: int, limit: int, silent: Mapping[str, int], settle_s: float
    ) -> AbstractAsyncContextManager[PgExpiredBatch]:
        params = {"after": after, "limit": limit, "workers": list(silent), "settle_s": settle_s}
        return self._expired(Q.select_expired, params, silent)

    @asynccontextmanager
    async def _expired(
        self,
        statement: TextClause,
        params: Mapping[str, Any],
        silent: Mapping[str, int],
        *,
        orphaned: bool = False,
    ) -> AsyncIterator[PgExpiredBatch]:
        with translated():
            async with self.engine.begin() as conn:
                rows = await conn.execute(statement, params)
                yield PgExpiredBatch(
                    conn,
                    [
                        ExpiredLease(
                            r.id,
                            r.epoch,
                            r.kind,
                            r.attempts,
                            r.retry,
                            r.worker,
                            silent.get(r.worker, 1) if r.worker is not None else 1,
                            orphaned,
                        )
                        for r in rows
                    ],
                )


def _array(items: Iterable[str]) -> str:
    """A PostgreSQL array literal of names (letters, digits, ``_.:-`` only: no quoting)."""
    return "{" + ",".join(items) + "}"
