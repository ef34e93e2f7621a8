"""One ledger over several databases: :class:`ShardedLedger`.

It implements the protocols of the processes that meet tasks of every ledger
shard (the worker's :class:`~ledgerq.ledger.protocol.WorkerLedger`, and the
operator's :class:`OperatorLedger`: inspection, operations, scheduling) over
one ledger per shard, in shard order. Statements on named tasks are split by
the shard in each id (:func:`~ledgerq.ledger.split.ids.shard_of_id`) and run
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

Each method is written once, in the protocol: most methods here are one line
that says how the call spreads (:mod:`ledgerq.ledger.split.spread`: ``everywhere``, ``by_ids``,
``on_shard_of``, ``on_first``) and how the answers merge, and pass the
caller's arguments through as they came, so the shards' own defaults apply
(none are restated here). Only the calls that plan across shards (claiming
round-robin, listing, finding, acting) are written out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Unpack

from ledgerq.core.errors import TaskNotFoundError
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import DEFAULT_LIMIT, TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.model import ClaimedTask, Fence, Held
from ledgerq.ledger.options import AuditOptions, BatchedActOptions, DueOptions
from ledgerq.ledger.protocol import (
    DirectLedger,
    HarnessLedger,
    InspectionLedger,
    OperationsLedger,
    RoutingLedger,
    SchedulingLedger,
    WorkerLedger,
)
from ledgerq.ledger.scheduling import PauseReport
from ledgerq.ledger.split.ids import shard_of_id, split_by_shard
from ledgerq.ledger.split.spread import Shards, by_ids, everywhere, on_first, on_shard_of

T = TypeVar("T")
L = TypeVar("L", bound=WorkerLedger)
D = TypeVar("D", bound=DirectLedger)


class OperatorLedger(InspectionLedger, OperationsLedger, SchedulingLedger, Protocol):
    """What ``ledgerq tasks``, ``stats``, ``show``, ``pause`` and ``kinds`` ask of the
    ledger: one :class:`~ledgerq.ledger.pg.PgLedger`, or a :class:`ShardedLedger`."""

    async def dispose(self) -> None: ...


class ShardLedger(DirectLedger, RoutingLedger, OperatorLedger, HarnessLedger, Protocol):
    """One shard's ledger as :class:`ShardedLedger` uses it."""


def _fence_id(fence: Fence) -> int:
    return fence[0]


def _concat(parts: list[list[T]]) -> list[T]:
    return [item for part in parts for item in part]


def _union(parts: list[dict[Any, Any]]) -> dict[Any, Any]:
    return {k: v for part in parts for k, v in part.items()}


def _changed(parts: list[list[str]]) -> list[str]:
    return sorted({kind for part in parts for kind in part})


def _tagged(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Every shard's rows as one list, each row naming its ``ledger_shard``."""
    return [{**row, "ledger_shard": k} for k, part in enumerate(parts) for row in part]


def _helds(parts: list[Held]) -> Held:
    return Held(
        (i for held in parts for i in held),
        (i for held in parts for i in held.cancelling),
        (i for held in parts for i in held.busy),
    )


# -- the ledgers -------------------------------------------------------------------------


class ShardedWorkerLedger(Shards[L]):
    """:class:`~ledgerq.ledger.protocol.WorkerLedger` over ``shards[k]``, the ledger of
    shard k."""

    claim = by_ids(_fence_id, _concat)
    whereabouts = by_ids(int, _union)
    heartbeat = by_ids(_fence_id, _helds)
    save_checkpoint = on_shard_of(_fence_id)
    finish = by_ids(lambda outcome: outcome.id, _concat)


class ShardedRouting(Shards[Any]):
    """What a worker serves, registered on every shard: each shard's relays route by
    their own database's subscriptions (:mod:`ledgerq.ledger.routing`)."""

    subscribe = everywhere()
    unsubscribe = everywhere()
    alive = everywhere()
    gone = everywhere()
    pool_members = on_first()  # every worker beats on every shard


class ShardedDirectLedger(ShardedWorkerLedger[D]):
    """Direct claims (``worker --direct``, broker-down mode) over every shard: each
    call starts at the next shard and takes what it finds there, then from the
    following ones until ``limit`` is met, so no shard waits behind another's backlog
    for more than one call per shard."""

    def __init__(self, shards: Sequence[D]) -> None:
        super().__init__(shards)
        self._next = 0

    async def claim_due(
        self,
        queues: Sequence[str],
        limit: int,
        worker: str,
        lease_s: float,
        **options: Unpack[DueOptions],
    ) -> list[ClaimedTask]:
        """``aging_s`` and ``kinds`` as the caller gave them (their defaults: the
        shards'); ``kinds`` read once, whatever iterable it came as."""
        kinds = options.get("kinds")
        if kinds is not None:
            options["kinds"] = frozenset(kinds)
        first, count = self._next, len(self.shards)
        self._next = (first + 1) % count
        won: list[ClaimedTask] = []
        for step in range(count):
            if len(won) >= limit:
                break
            shard = self.shards[(first + step) % count]
            won += await shard.claim_due(queues, limit - len(won), worker, lease_s, **options)
        return won


def _stats(parts: list[dict[str, Any]]) -> dict[str, Any]:
    by_status: dict[str, int] = {}
    by_kind: dict[str, dict[str, int]] = {}
    for part in parts:
        for status, n in part["by_status"].items():
            by_status[status] = by_status.get(status, 0) + n
        for kind, counts in part["by_kind"].items():
            merged = by_kind.setdefault(kind, {})
            for status, n in counts.items():
                merged[status] = merged.get(status, 0) + n
    return {"total": sum(by_status.values()), "by_status": by_status, "by_kind": by_kind}


def _latest_subscriptions(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """A worker registers on every shard, so each (worker, queue) once, with its
    latest expiry; live first."""
    latest: dict[tuple[str, str], dict[str, Any]] = {}
    for row in (row for part in parts for row in part):
        key = (row["worker"], row["queue"])
        if key not in latest or row["expires_at"] > latest[key]["expires_at"]:
            latest[key] = row
    return sorted(
        latest.values(),
        key=lambda r: (not r["live"], r["queue"], r["route"] or "", r["worker"]),
    )


def _autovacuum(parts: list[list[str]]) -> list[str]:
    return [f"ledger shard {k}: {why}" for k, part in enumerate(parts) for why in part]


def _spans(parts: list[tuple[int, float | None]]) -> tuple[int, float | None]:
    """The finished tasks of every shard, and the longest shard's span (the shards
    drain side by side, so that is the drain's span within a clock skew)."""
    spans = [span for _, span in parts if span is not None]
    return sum(n for n, _ in parts), max(spans) if spans else None


def _kinds(parts: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """Each kind's limit and pause (the same on every shard), its waiting tasks summed."""
    merged: dict[str, dict[str, Any]] = {}
    for part in parts:
        for row in part:
            seen = merged.get(row["kind"])
            if seen is None:
                merged[row["kind"]] = dict(row)
            else:
                seen["pending"] = int(seen.get("pending") or 0) + int(row["pending"] or 0)
    return [merged[kind] for kind in sorted(merged)]


class ShardedLedger(ShardedDirectLedger[ShardLedger], ShardedRouting):
    """Every protocol of the processes that meet tasks of every shard (the worker's,
    direct claims and routing included; :class:`OperatorLedger`) and the testing
    protocol, over ``shards[k]``."""

    # -- inspection: every shard asked, the answers merged --------------------------------
    stats = everywhere(_stats)
    unserved = everywhere(_tagged)  # each row naming its shard
    windows = everywhere(_tagged)  # each shard's relays fill their own database's
    subscriptions = everywhere(_latest_subscriptions)
    show = on_shard_of(int)
    ping = everywhere(all)
    count_expired = everywhere(sum)
    autovacuum_off = everywhere(_autovacuum)

    # -- the testing protocol ---------------------------------------------------------
    backdate = by_ids(int, sum)
    count_finished = everywhere(sum)
    drain_span = everywhere(_spans)
    timings = by_ids(int, _concat)
    truncate = everywhere()
    seed_history = on_first()
    seed_varied_history = on_first()
    clear_finished = everywhere()

    # -- scheduling: every shard keeps the same pauses and limits ---------------------
    pause = everywhere(lambda reports: _merge_pauses(reports))
    resume = everywhere(lambda reports: _merge_pauses(reports))
    pauses = everywhere(lambda parts: parts[0])
    set_limit = everywhere()
    register_limits = everywhere(_changed)
    register_ordering = everywhere(_changed)
    register_sticky = everywhere(_changed)
    register_children_done = everywhere(_changed)
    register_defaults = everywhere(_changed)
    #: The periodic enqueuer's: on shard 0, whose permanent keys let one task per
    #: period through (keys are unique per database, not across them).
    enqueue = on_first()
    kinds = everywhere(_kinds)
    dispose = everywhere()

    # -- operations: planned across the shards ----------------------------------------

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
        rows = _tagged(await self._each(lambda shard: shard.audit(limit, before)))
        rows.sort(key=lambda row: str(row.get("at") or ""), reverse=True)
        return rows[:limit]

    async def act(
        self, action: Action, selection: TaskFilter, **options: Unpack[BatchedActOptions]
    ) -> Report:
        """The action on each shard in turn (named ids: on their shards only), with the
        caller's options; one report adding theirs up, ``audit_id`` the first shard's
        record."""
        if selection.ids:
            groups = split_by_shard(selection.ids, int)
            plan = [
                (self._shard(k), replace(selection, ids=tuple(ids))) for k, ids in groups.items()
            ]
        else:
            plan = [(shard, selection) for shard in self.shards]
        total: Report | None = None
        for shard, part in plan:
            report = await shard.act(action, part, **options)
            total = report if total is None else _add(total, report)
        assert total is not None
        return total

    async def release_key(self, key: str, **options: Unpack[AuditOptions]) -> KeyRelease:
        """The key released on each shard that has it, in turn (a shard's release is
        its own transaction and audit record); one report adding theirs up,
        ``audit_id`` the first shard's record. Unknown on every shard: the first
        shard's ``TaskNotFoundError``."""
        total: KeyRelease | None = None
        unknown: TaskNotFoundError | None = None
        for shard in self.shards:
            try:
                part = await shard.release_key(key, **options)
            except TaskNotFoundError as exc:
                unknown = unknown or exc
                continue
            total = part if total is None else _add_releases(total, part)
        if total is None:
            assert unknown is not None
            raise unknown
        return total


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
    _every: type[ShardLedger] = ShardedLedger
    _harness: type[HarnessLedger] = ShardedLedger
