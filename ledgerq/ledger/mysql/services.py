"""The worker's side of the seam on MySQL / MariaDB: claims (the broker path's
``claim`` and the ``--direct`` path's ``claim_due``), ``finish``, ``heartbeat``,
``whereabouts``, checkpoints, what a worker registers at its start, and its
subscriptions and liveness beats.

Each operation is a plan (:mod:`.claims`, :mod:`.attempts`, :mod:`.inserts`,
driven by :mod:`.plans`) run in one transaction of the ledger's own, on a
connection in READ COMMITTED (set for every connection of the engine,
:mod:`.engines`). Why that level, statement by statement:

- ``claim_due`` reads its candidates with a plain read, then locks them by
  primary key with ``FOR UPDATE SKIP LOCKED`` and claims them by id (MariaDB
  has no ``UPDATE ... RETURNING``, and an ``UPDATE ... ORDER BY ... LIMIT`` could
  not skip locked rows). Under REPEATABLE READ the locking read would take
  next-key (gap) locks on the due index as it scanned, and block every
  producer inserting into that range until the claim commits; under READ
  COMMITTED InnoDB locks only the rows it returns. The races: two workers read
  the same candidates (the read takes no lock); the first to lock a row wins
  it, the other skips it (SKIP LOCKED) and claims fewer this time, never the
  same task. A row claimed and committed between the read and the lock is
  re-checked by the locking read on its latest version (status must still be
  ``pending``) and skipped. A relay or a second claim holding a row makes this
  one skip it, never wait.
- ``claim`` (a broker delivery's fence) locks the rows of its fences, waiting
  for a holder as PostgreSQL's claim does (a relay's publish commits within
  milliseconds), and re-checks epoch and status on the latest version: a stale
  message claims nothing.
- ``finish`` locks its rows under their fences, decides each row's end in that
  one locking read, and carries it out by id (history insert, delete, or back
  to pending) before its commit: nobody can move a locked row in between. Rows
  are always locked in id order, so two finishes cannot deadlock each other;
  if InnoDB still reports a deadlock (1213) it has rolled the transaction
  back, and the error is transient: the worker's finisher retries it.
- ``heartbeat`` locks with ``SKIP LOCKED`` (a row another transaction holds is
  busy, not lost), as PostgreSQL's does.

What the worker registers at its start: per-kind defaults
(``@task(max_attempts=..., retry=..., timeout=...)``), rate limits
(``@task(rate_limit=...)``, the buckets every pick meters: :mod:`.metering`),
orderings (``@task(ordering="block")``: :mod:`.keys`) and fan-out callbacks
(``@task(on_children_done=...)``, :mod:`.families`), each written only where it
differs from the stored one (a restart does not refill a bucket), and sticky
retries (``@task(sticky_retry=...)``: each kind's window, :mod:`.sticky`; the
finish's retry holds the task for the attempt's worker, the pick honours the
hold until it lapses).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar, Unpack

from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.model import ClaimedTask, Fence, Finished, Held, KindDefaults, Outcome
from ledgerq.ledger.mysql import attempts, claims, inserts, plans
from ledgerq.ledger.mysql.base import MyBase, decoded, micros, translated
from ledgerq.ledger.mysql.families import FQ
from ledgerq.ledger.mysql.keys import KQ
from ledgerq.ledger.mysql.metering import MeQ
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.mysql.rows import shown
from ledgerq.ledger.mysql.sticky import SQ, windows_to_write
from ledgerq.ledger.options import DueOptions
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, RateLimit
from ledgerq.ledger.specs import TaskSpec
from ledgerq.ledger.validation import MAX_CLAIM_PAYLOAD_BYTES

R = TypeVar("R")


class MyServices(MyBase):
    async def _transaction(self, plan: plans.Plan[R]) -> R:
        """Run ``plan`` in one transaction of the ledger's own (READ COMMITTED)."""
        with translated():
            async with self.engine.begin() as conn:
                return await plans.adrive(plan, plans.async_runner(conn, "ledgerq"))

    # -- worker ---------------------------------------------------------------------
    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        plan = claims.claim_fenced(list(fences), worker, lease_s, MAX_CLAIM_PAYLOAD_BYTES)
        return await self._transaction(plan)

    async def claim_due(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease_s: float,
        **options: Unpack[DueOptions],
    ) -> list[ClaimedTask]:
        kinds = options.get("kinds")
        plan = claims.claim_due(
            list(queues),
            None if kinds is None else sorted(kinds),
            limit,
            options.get("aging_s", DEFAULT_AGING_S) or 0.0,
            worker,
            lease_s,
            MAX_CLAIM_PAYLOAD_BYTES,
        )
        return await self._transaction(plan)

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        wanted = sorted(set(ids))
        if not wanted:
            return {}
        rows = await self._rows(MQ.whereabouts, {"ids": wanted})
        return {int(r.id): str(r.status) for r in rows}

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        if not outcomes:
            return []
        return await self._transaction(attempts.finish(outcomes))

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        return await self._transaction(attempts.heartbeat(list(fences), lease_s, progress))

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        return await self._transaction(attempts.save_checkpoint(fence, json.dumps(state)))

    # -- routing ---------------------------------------------------------------------
    async def subscribe(
        self,
        worker: str,
        subscriptions: Sequence[Subscription],
        ttl_s: float,
        *,
        direct: bool = False,
    ) -> None:
        rows = [
            {
                "worker": worker,
                "queue": s.queue,
                "kinds": None if s.kinds is None else json.dumps(sorted(s.kinds)),
                "shards": None if s.shards is None else json.dumps(sorted(s.shards)),
                "route": s.route,
                "capacity": s.capacity,
                "sticky": s.sticky,
                "direct": direct,
                "ttl_us": micros(ttl_s),
            }
            for s in subscriptions
        ]
        queues = [s.queue for s in subscriptions]
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(MQ.drop_subscriptions, {"worker": worker, "queues": queues})
                if rows:
                    await conn.execute(MQ.subscribe, rows)

    async def unsubscribe(self, worker: str) -> None:
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(MQ.drop_stale_subscriptions)
                await conn.execute(MQ.unsubscribe, {"worker": worker})

    async def alive(self, worker: str, silence_s: float) -> None:
        await self._rows(MQ.worker_alive, {"worker": worker, "silence_s": silence_s})

    async def gone(self, worker: str) -> None:
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(MQ.drop_stale_workers)
                await conn.execute(MQ.worker_gone, {"worker": worker})

    async def pool_members(self, tag: str) -> list[str]:
        return [str(r.worker) for r in await self._rows(MQ.pool_members, {"tag": tag})]

    # -- what a worker registers at its start -----------------------------------------
    async def register_limits(self, limits: Mapping[str, RateLimit]) -> list[str]:
        """Write each kind's limit that differs from the stored one (its bucket
        full); the kinds written. Two workers starting together may both write a
        new limit: the same values, the bucket full either way."""
        if not limits:
            return []
        rows = await self._rows(MeQ.kind_limits, {"kinds": sorted(limits)})
        stored = {
            str(r.kind): None if r.rate_per_s is None else RateLimit(r.rate_per_s, r.burst)
            for r in rows
        }
        changed = sorted(kind for kind, limit in limits.items() if stored.get(kind) != limit)
        if not changed:
            return []
        params = [
            {"kind": kind, "rate": limits[kind].rate_per_s, "burst": limits[kind].burst}
            for kind in changed
        ]
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(MeQ.set_limit, params)
        return changed

    async def register_ordering(self, orderings: Mapping[str, str]) -> list[str]:
        """Write each kind's ordering that differs from the stored one (a kind with
        no row is 'release'); the kinds written."""
        if not orderings:
            return []
        rows = await self._rows(KQ.kind_orderings, {"kinds": sorted(orderings)})
        stored = {str(r.kind): str(r.ordering) for r in rows}
        changed = sorted(k for k, v in orderings.items() if stored.get(k, "release") != v)
        if not changed:
            return []
        params = [{"kind": kind, "ordering": orderings[kind]} for kind in changed]
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(KQ.set_ordering, params)
        return changed

    async def register_sticky(self, windows: Mapping[str, float | None]) -> list[str]:
        """Write each kind's ``@task(sticky_retry=...)`` window that differs from the
        stored one (:mod:`.sticky`); the kinds written."""
        if not windows:
            return []
        stored = await self._rows(SQ.kind_windows, {"kinds": sorted(windows)})
        changed = windows_to_write(windows, stored)
        if changed:
            params = [{"kind": kind, "seconds": windows[kind]} for kind in changed]
            with translated():
                async with self.engine.begin() as conn:
                    await conn.execute(SQ.set_window, params)
        return changed

    async def register_children_done(self, callbacks: Mapping[str, str | None]) -> list[str]:
        """Write each kind's callback that differs from the stored one (a kind without
        one and without a row is not written); the kinds written."""
        if not callbacks:
            return []
        rows = await self._rows(FQ.children_done_kinds, {"kinds": sorted(callbacks)})
        stored = {str(r.kind): r.on_children_done for r in rows}
        changed = sorted(
            kind
            for kind, callback in callbacks.items()
            if stored.get(kind) != callback and (kind in stored or callback is not None)
        )
        if changed:
            params = [{"kind": kind, "callback": callbacks[kind]} for kind in changed]
            with translated():
                async with self.engine.begin() as conn:
                    await conn.execute(FQ.set_children_done, params)
        return changed

    async def register_defaults(self, defaults: Mapping[str, KindDefaults]) -> list[str]:
        """Write each kind's defaults that differ from the stored ones; the kinds written."""
        if not defaults:
            return []
        rows = await self._rows(MQ.kind_defaults, {"kinds": sorted(defaults)})
        stored = {
            str(r.kind): KindDefaults(
                r.max_attempts,
                decoded(r.retry),
                None if r.timeout_s is None else float(r.timeout_s),
            )
            for r in rows
        }
        # A kind with no row yet is written whatever its defaults (PostgreSQL's insert).
        changed = sorted(kind for kind, d in defaults.items() if stored.get(kind) != d)
        if not changed:
            return []
        params = [
            {
                "kind": kind,
                "max_attempts": defaults[kind].max_attempts,
                "retry": None if defaults[kind].retry is None else json.dumps(defaults[kind].retry),
                "timeout_s": defaults[kind].timeout_s,
            }
            for kind in changed
        ]
        with translated():
            async with self.engine.begin() as conn:
                await conn.execute(MQ.set_kind_defaults, params)
        return changed

    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]:
        """Insert ``specs`` in one committed transaction of the ledger's own."""
        return await self._transaction(inserts.enqueue_many(list(specs)))

    # -- inspection -------------------------------------------------------------------
    async def show(self, task_id: int) -> dict[str, Any]:
        rows = await self._rows(MQ.show_task, {"id": task_id})
        if not rows:
            raise TaskNotFoundError(f"no task with id {task_id}")
        return shown(rows[0])

    async def stats(self) -> dict[str, Any]:
        """Counts by status and by kind, live and history together."""
        by_status: dict[str, int] = {}
        by_kind: dict[str, dict[str, int]] = {}
        for statement in (MQ.stats_live, MQ.stats_history):
            for row in await self._rows(statement, {}):
                status, kind, n = str(row.status), str(row.kind), int(row.n)
                by_status[status] = by_status.get(status, 0) + n
                counts = by_kind.setdefault(kind, {})
                counts[status] = counts.get(status, 0) + n
        return {"total": sum(by_status.values()), "by_status": by_status, "by_kind": by_kind}

    async def ping(self) -> bool:
        rows = await self._rows(MQ.ping, {})
        return bool(rows and rows[0][0])

    async def autovacuum_off(self) -> list[str]:
        """Nothing to warn about: InnoDB purges old row versions on its own (no VACUUM)."""
        return []
