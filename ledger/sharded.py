"""One ledger over several databases: :class:`ShardedLedger`.

It implements the protocols of the processes that meet tasks of every ledger
shard (the worker's :class:`~ledgerq.ledger.protocol.WorkerLedger`, and the
operator's :class:`OperatorLedger`: inspection, operations, scheduling) over
one ledger per shard, in shard order. Statements on named tasks are split by
the shard in each id (:func:`~ledgerq.ledger.shard_ids.shard_of_id`) and run
on each shard concurrently; questions about every task ask every shard and
merge the answers. The relay, the reconciler, retention and the rollup work
on one database at a time (one relay loop and one reconciler pass per shard),
so they take a shard's own ledger and are not here.

Races and costs: nothing spans two databases in one transaction. A batch of
fences from several shards is several compare-and-sets, each atomic on its
own shard, which is all the worker's batches ever needed (every row is fenced
on its own). An operator action over every shard is one action per shard
(one audit record in each); a crash between them leaves the later shards
untouched, and running the action again finishes it (actions are
idempotent). Listing merges by id, newest first *within* each shard, the
higher shards first: ids are the keyset, so ``--before`` pages stay exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.errors import TaskNotFoundError
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.model import ClaimedTask, Fence, Finished, Held, Outcome, TaskTiming
from ledgerq.ledger.producer import TaskSpec
from ledgerq.ledger.protocol import (
    DirectLedger,
    InspectionLedger,
    OperationsLedger,
    RoutingLedger,
    SchedulingLedger,
    WorkerLedger,
)
from ledgerq.ledger.routing import Subscription
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, PauseReport, RateLimit, Scope
from ledgerq.ledger.shard_ids import shard_of_id, split_by_shard

log = logging.getLogger("ledgerq")

T = TypeVar("T")
R = TypeVar("R")
L = TypeVar("L", bound=WorkerLedger)


class OperatorLedger(InspectionLedger, OperationsLedger, SchedulingLedger, Protocol):
    """What ``ledgerq tasks``, ``stats``, ``show``, ``pause`` and ``kinds`` ask of the
    ledger: one :class:`~ledgerq.ledger.pg.PgLedger`, or a :class:`ShardedLedger`."""

    async def dispose(self) -> None: ...


class ShardLedger(WorkerLedger, OperatorLedger, Protocol):
    """One shard's ledger as :class:`ShardedLedger` uses it."""


class ShardedWorkerLedger(Generic[L]):
    """:class:`~ledgerq.ledger.protocol.WorkerLedger` over ``shards[k]``, the ledger of
    shard k."""

    def __init__(self, shards: Sequence[L]) -> None:
        if not shards:
            raise ValueError("a sharded ledger needs at least one shard")
        self.shards = list(shards)

    def _shard(self, index: int) -> L:
        if index >= len(self.shards):
            raise TaskNotFoundError(
                f"ids of ledger shard {index} cannot exist here: {len(self.shards)} "
                "ledger shard(s) are configured"
            )
        return self.shards[index]

    async def _each(self, call: Callable[[L], Awaitable[R]]) -> list[R]:
        """``call`` on every shard, concurrently; the answers in shard order."""
        return list(await asyncio.gather(*(call(shard) for shard in self.shards)))

    async def _by_id(
        self,
        items: Iterable[T],
        key: Callable[[T], int],
        call: Callable[[L, list[T]], Awaitable[R]],
    ) -> list[R]:
        """``call`` once per shard that ``items`` (by id ``key``) touch, concurrently.
        Ids of a shard this ledger does not have (a message from another deployment
        on a shared broker, say) match no row: they are left out, as a lost
        compare-and-set would be, and logged."""
        groups = split_by_shard(items, key)
        unknown = sorted(k for k in groups if k >= len(self.shards))
        if unknown:
            log.warning(
                "ids of ledger shard(s) %s ignored: %d ledger shard(s) are configured "
                "(is every process given the same LEDGERQ_DATABASE_URL list?)",
                ", ".join(map(str, unknown)),
                len(self.shards),
            )
        return list(
            await asyncio.gather(
                *(call(self.shards[k], part) for k, part in groups.items() if k < len(self.shards))
            )
        )

    # -- the worker's ----------------------------------------------------------

    async def claim(
        self, fences: Iterable[Fence], worker: str, lease_s: float
    ) -> list[ClaimedTask]:
        won = await self._by_id(
            fences, lambda f: f[0], lambda shard, part: shard.claim(part, worker, lease_s)
        )
        return [task for part in won for task in part]

    async def whereabouts(self, ids: Iterable[int]) -> dict[int, str]:
        found = await self._by_id(ids, int, lambda shard, part: shard.whereabouts(part))
        return {k: v for part in found for k, v in part.items()}

    async def heartbeat(
        self, fences: Iterable[Fence], lease_s: float, progress: Mapping[int, str] | None = None
    ) -> Held:
        helds = await self._by_id(
            fences,
            lambda f: f[0],
            lambda shard, part: shard.heartbeat(part, lease_s, progress),
        )
        return Held(
            (i for held in helds for i in held),
            (i for held in helds for i in held.cancelling),
            (i for held in helds for i in held.busy),
        )

    async def save_checkpoint(self, fence: Fence, state: Any) -> bool:
        return await self._shard(shard_of_id(fence[0])).save_checkpoint(fence, state)

    async def finish(self, outcomes: Sequence[Outcome]) -> list[Finished]:
        done = await self._by_id(outcomes, lambda o: o.id, lambda shard, part: shard.finish(part))
        return [row for part in done for row in part]


class ShardedRouting:
    """What a worker serves, registered on every shard: each shard's relays route by
    their own database's subscriptions (:mod:`ledgerq.ledger.routing`)."""

    def __init__(self, shards: Sequence[RoutingLedger]) -> None:
        self.shards = list(shards)

    async def subscribe(
        self,
        worker: str,
        subscriptions: Sequence[Subscription],
        ttl_s: float,
        *,
        direct: bool = False,
    ) -> None:
        await asyncio.gather(
            *(s.subscribe(worker, subscriptions, ttl_s, direct=direct) for s in self.shards)
        )

    async def unsubscribe(self, worker: str) -> None:
        await asyncio.gather(*(s.unsubscribe(worker) for s in self.shards))

    async def alive(self, worker: str, silence_s: float) -> None:
        await asyncio.gather(*(s.alive(worker, silence_s) for s in self.shards))

    async def gone(self, worker: str) -> None:
        await asyncio.gather(*(s.gone(worker) for s in self.shards))

    async def pool_members(self, tag: str) -> list[str]:
        """From the first shard: every worker beats on every shard."""
        return await self.shards[0].pool_members(tag)


class ShardedDirectLedger(ShardedWorkerLedger[DirectLedger]):
    """Direct claims (``worker --direct``, broker-down mode) over every shard: each
    call starts at the next shard and takes what it finds there, then from the
    following ones until ``limit`` is met, so no shard waits behind another's backlog
    for more than one call per shard."""

    def __init__(self, shards: Sequence[DirectLedger]) -> None:
        super().__init__(shards)
        self._next = 0

    async def claim_due(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease_s: float,
        aging_s: float = DEFAULT_AGING_S,
        kinds: Iterable[str] | None = None,
    ) -> list[ClaimedTask]:
        wanted = None if kinds is None else frozenset(kinds)
        first, count = self._next, len(self.shards)
        self._next = (first + 1) % count
        won: list[ClaimedTask] = []
        for step in range(count):
            if len(won) >= limit:
                break
            shard = self.shards[(first + step) % count]
            won += await shard.claim_due(queues, limit - len(won), worker, lease_s, aging_s, wanted)
        return won


class ShardedLedger(ShardedWorkerLedger[ShardLedger]):
    """:class:`ShardedWorkerLedger` and :class:`OperatorLedger` over ``shards[k]``."""

    # -- inspection ------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        by_status: dict[str, int] = {}
        by_kind: dict[str, dict[str, int]] = {}
        for part in await self._each(lambda shard: shard.stats()):
            for status, n in part["by_status"].items():
                by_status[status] = by_status.get(status, 0) + n
            for kind, counts in part["by_kind"].items():
                merged = by_kind.setdefault(kind, {})
                for status, n in counts.items():
                    merged[status] = merged.get(status, 0) + n
        return {"total": sum(by_status.values()), "by_status": by_status, "by_kind": by_kind}

    async def unserved(self) -> list[dict[str, Any]]:
        """Every shard's due tasks no live worker serves, each row naming its shard."""
        parts = await self._each(lambda shard: shard.unserved())
        return [{**row, "ledger_shard": k} for k, part in enumerate(parts) for row in part]

    async def windows(self) -> list[dict[str, Any]]:
        """Every shard's windows, each row naming its shard (each shard's relays
        fill their own database's windows)."""
        parts = await self._each(lambda shard: shard.windows())
        return [{**row, "ledger_shard": k} for k, part in enumerate(parts) for row in part]

    async def subscriptions(self) -> list[dict[str, Any]]:
        """Every shard's subscriptions as one list: a worker registers on every shard,
        so each (worker, queue) appears once, with its latest expiry."""
        parts = await self._each(lambda shard: shard.subscriptions())
        latest: dict[tuple[str, str], dict[str, Any]] = {}
        for row in (row for part in parts for row in part):
            key = (row["worker"], row["queue"])
            if key not in latest or row["expires_at"] > latest[key]["expires_at"]:
                latest[key] = row
        return sorted(
            latest.values(),
            key=lambda r: (not r["live"], r["queue"], r["route"] or "", r["worker"]),
        )

    async def show(self, task_id: int) -> dict[str, Any]:
        return await self._shard(shard_of_id(task_id)).show(task_id)

    async def ping(self) -> bool:
        return all(await self._each(lambda shard: shard.ping()))

    async def count_expired(self) -> int:
        return sum(await self._each(lambda shard: shard.count_expired()))

    async def autovacuum_off(self) -> list[str]:
        answers = await self._each(lambda shard: shard.autovacuum_off())
        return [f"ledger shard {k}: {why}" for k, part in enumerate(answers) for why in part]

    async def count_finished(self) -> int:
        return sum(await self._each(lambda shard: shard.count_finished()))

    async def drain_span(self) -> tuple[int, float | None]:
        """The finished tasks of every shard, and the longest shard's span (the shards
        drain side by side, so that is the drain's span within a clock skew)."""
        parts = await self._each(lambda shard: shard.drain_span())
        spans = [span for _, span in parts if span is not None]
        return sum(n for n, _ in parts), max(spans) if spans else None

    async def timings(self, ids: Iterable[int]) -> list[TaskTiming]:
        found = await self._by_id(ids, int, lambda shard, part: shard.timings(part))
        return [row for part in found for row in part]

    async def truncate(self, *, keep_subscriptions: bool = False) -> None:
        await self._each(lambda shard: shard.truncate(keep_subscriptions=keep_subscriptions))

    async def seed_history(self, rows: int) -> None:
        await self.shards[0].seed_history(rows)

    async def seed_varied_history(self, rows: int, chunk: int = 200_000) -> None:
        await self.shards[0].seed_varied_history(rows, chunk)

    async def clear_finished(self) -> None:
        await self._each(lambda shard: shard.clear_finished())

    # -- operations ------------------------------------------------------------

    async def list_tasks(self, selection: TaskFilter) -> list[dict[str, Any]]:
        parts = await self._each(lambda shard: shard.list_tasks(selection))
        rows = sorted((row for part in parts for row in part), key=lambda r: -int(r["id"]))
        return rows[: selection.limit or DEFAULT_LIMIT]

    async def find(
        self, task_id: int | None = None, *, business_key: str | None = None
    ) -> dict[str, Any]:
        if task_id is not None:
            return await self._shard(shard_of_id(task_id)).find(task_id)
        if business_key is None:
            raise TaskNotFoundError("name a task id or a business key")
        newest = await self.list_tasks(TaskFilter(business_key=business_key))
        if not newest:
            raise TaskNotFoundError(f"no task with business key {business_key!r}")
        latest = max(newest, key=lambda row: str(row.get("created_at") or ""))
        return await self.find(int(latest["id"]))

    async def audit(
        self, limit: int = DEFAULT_LIMIT, before: int | None = None
    ) -> list[dict[str, Any]]:
        """The newest audit records of every shard (``before``: an audit id, per shard),
        newest first, each with its ``ledger_shard``."""
        parts = await self._each(lambda shard: shard.audit(limit, before))
        rows = [{**row, "ledger_shard": k} for k, part in enumerate(parts) for row in part]
        rows.sort(key=lambda row: str(row.get("at") or ""), reverse=True)
        return rows[:limit]

    async def act(
        self,
        action: Action,
        selection: TaskFilter,
        *,
        actor: str,
        reason: str | None = None,
        dry_run: bool = False,
        batch_size: int = 500,
        progress: Callable[[Report], None] | None = None,
    ) -> Report:
        """The action on each shard in turn (named ids: on their shards only); one
        report adding theirs up, ``audit_id`` the first shard's record."""
        if selection.ids:
            groups = split_by_shard(selection.ids, int)
            plan = [
                (self._shard(k), replace(selection, ids=tuple(ids))) for k, ids in groups.items()
            ]
        else:
            plan = [(shard, selection) for shard in self.shards]
        total: Report | None = None
        for shard, part in plan:
            report = await shard.act(
                action,
                part,
                actor=actor,
                reason=reason,
                dry_run=dry_run,
                batch_size=batch_size,
                progress=progress,
            )
            total = report if total is None else _add(total, report)
        assert total is not None
        return total

    async def release_key(
        self, key: str, *, actor: str, reason: str | None = None, dry_run: bool = False
    ) -> KeyRelease:
        """The key released on each shard that has it, in turn (a shard's release is
        its own transaction and audit record); one report adding theirs up,
        ``audit_id`` the first shard's record. Unknown on every shard: the first
        shard's ``TaskNotFoundError``."""
        total: KeyRelease | None = None
        unknown: TaskNotFoundError | None = None
        for shard in self.shards:
            try:
                part = await shard.release_key(key, actor=actor, reason=reason, dry_run=dry_run)
            except TaskNotFoundError as exc:
                unknown = unknown or exc
                continue
            total = part if total is None else _add_releases(total, part)
        if total is None:
            assert unknown is not None
            raise unknown
        return total

    # -- scheduling: every shard keeps the same pauses and limits ---------------

    async def pause(
        self, scope: Scope, name: str, *, actor: str, reason: str | None = None
    ) -> PauseReport:
        reports = await self._each(lambda s: s.pause(scope, name, actor=actor, reason=reason))
        return _merge_pauses(reports)

    async def resume(self, scope: Scope, name: str, *, actor: str) -> PauseReport:
        return _merge_pauses(await self._each(lambda s: s.resume(scope, name, actor=actor)))

    async def pauses(self) -> list[dict[str, Any]]:
        return (await self._each(lambda shard: shard.pauses()))[0]

    async def set_limit(self, kind: str, limit: RateLimit | None, *, actor: str) -> None:
        await self._each(lambda shard: shard.set_limit(kind, limit, actor=actor))

    async def register_limits(self, limits: Mapping[str, RateLimit]) -> list[str]:
        changed = await self._each(lambda shard: shard.register_limits(limits))
        return sorted({kind for part in changed for kind in part})

    async def register_ordering(self, orderings: Mapping[str, str]) -> list[str]:
        changed = await self._each(lambda shard: shard.register_ordering(orderings))
        return sorted({kind for part in changed for kind in part})

    async def register_children_done(self, callbacks: Mapping[str, str | None]) -> list[str]:
        changed = await self._each(lambda shard: shard.register_children_done(callbacks))
        return sorted({kind for part in changed for kind in part})

    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]:
        """The periodic enqueuer's: on shard 0, whose permanent keys let one task per
        period through (keys are unique per database, not across them)."""
        return await self.shards[0].enqueue(specs)

    async def kinds(self) -> list[dict[str, Any]]:
        """Each kind's limit and pause (the same on every shard), its waiting tasks summed."""
        merged: dict[str, dict[str, Any]] = {}
        for part in await self._each(lambda shard: shard.kinds()):
            for row in part:
                seen = merged.get(row["kind"])
                if seen is None:
                    merged[row["kind"]] = dict(row)
                else:
                    seen["pending"] = int(seen.get("pending") or 0) + int(row["pending"] or 0)
        return [merged[kind] for kind in sorted(merged)]

    async def dispose(self) -> None:
        await self._each(lambda shard: shard.dispose())


def _add(a: Report, b: Report) -> Report:
    reasons = dict(a.reasons)
    for why, n in b.reasons.items():
        reasons[why] = reasons.get(why, 0) + n
    return replace(
        a,
        matched=a.matched + b.matched,
        changed=a.changed + b.changed,
        skipped=a.skipped + b.skipped,
        reasons=reasons,
        audit_id=a.audit_id if a.audit_id is not None else b.audit_id,
        asked_to_stop=a.asked_to_stop + b.asked_to_stop,
        cascaded=a.cascaded + b.cascaded,
    )


def _add_releases(a: KeyRelease, b: KeyRelease) -> KeyRelease:
    return replace(
        a,
        released=sorted([*a.released, *b.released]),
        moved_on=a.moved_on + b.moved_on,
        waiting=a.waiting + b.waiting,
        live=a.live + b.live,
        audit_id=a.audit_id if a.audit_id is not None else b.audit_id,
    )


def _merge_pauses(reports: Sequence[PauseReport]) -> PauseReport:
    """One report: changed on any shard, the unpublished tasks of all."""
    return replace(
        reports[0],
        changed=any(r.changed for r in reports),
        unpublished=sum(r.unpublished for r in reports),
    )


if TYPE_CHECKING:  # mypy checks the classes against the protocols they serve
    _worker: type[WorkerLedger] = ShardedWorkerLedger
    _direct: type[DirectLedger] = ShardedDirectLedger
    _routing: type[RoutingLedger] = ShardedRouting
    _operator: type[OperatorLedger] = ShardedLedger
