"""Pause and resume queues and kinds, and set rate limits: :func:`pause`,
:func:`resume`, :func:`pauses`, :func:`kinds`, :func:`set_rate_limit` (and their
async twins). What ``ledgerq queues ...`` and ``ledgerq kinds ...`` run.

A pause is a row in the ledger: the relay publishes none of the queue's (or
kind's) tasks, the published but unclaimed ones are taken back (epoch + 1, so
their messages are skipped as stale), running tasks run on. Pausing what is
paused, or resuming what is not, changes nothing and writes no audit record
(``PauseReport.changed`` is False). A rate limit is a token bucket every relay
charges; a worker whose ``@task`` sets ``rate_limit`` writes its own at start,
so the last writer wins. Each change is audited. A bad scope, name or rate
raises :class:`~ledgerq.core.errors.InvalidTaskError` naming it; nothing is
written.
"""

from __future__ import annotations

from ledgerq.admin.results import KindState, Pause, RateLimitChange
from ledgerq.admin.targets import Target, operator_ledger, os_user, sync_twin
from ledgerq.ledger.scheduling import PauseReport, RateLimit, Scope, check_scope


async def apause(
    target: Target, scope: Scope, name: str, *, actor: str | None = None, reason: str | None = None
) -> PauseReport:
    """Pause queue or kind ``name`` (``scope``: ``"queue"`` or ``"kind"``)."""
    scope, name = check_scope(scope, name)
    async with operator_ledger(target) as ledger:
        return await ledger.pause(scope, name, actor=actor or os_user(), reason=reason)


pause = sync_twin(apause)


async def aresume(
    target: Target, scope: Scope, name: str, *, actor: str | None = None
) -> PauseReport:
    """Lift the pause of queue or kind ``name``; the next relay batch publishes."""
    scope, name = check_scope(scope, name)
    async with operator_ledger(target) as ledger:
        return await ledger.resume(scope, name, actor=actor or os_user())


resume = sync_twin(aresume)


async def apauses(target: Target, scope: Scope | None = None) -> list[Pause]:
    """The pauses in force (of ``scope`` only, if given), oldest first."""
    async with operator_ledger(target) as ledger:
        rows = await ledger.pauses()
    return [Pause.from_row(r) for r in rows if scope is None or r["scope"] == scope]


pauses = sync_twin(apauses)


async def akinds(target: Target) -> list[KindState]:
    """Kinds with a rate limit, a pause or ordering ``block``, and their pending counts."""
    async with operator_ledger(target) as ledger:
        return [KindState.from_row(r) for r in await ledger.kinds()]


kinds = sync_twin(akinds)


async def aset_rate_limit(
    target: Target,
    kind: str,
    rate: str | RateLimit | None,
    *,
    burst: float | None = None,
    actor: str | None = None,
) -> RateLimitChange:
    """Set ``kind``'s rate limit across every relay: ``"20/s"``, ``"100/m"``,
    ``"10/h"`` or a :class:`RateLimit`; ``burst`` is the bucket (default one
    second of rate). ``rate=None`` lifts the limit."""
    limit = rate if isinstance(rate, RateLimit) or rate is None else RateLimit.parse(rate, burst)
    check_scope("kind", kind)
    async with operator_ledger(target) as ledger:
        await ledger.set_limit(kind, limit, actor=actor or os_user())
    if limit is None:
        return RateLimitChange(kind, None, None)
    return RateLimitChange(kind, limit.rate_per_s, limit.burst)


set_rate_limit = sync_twin(aset_rate_limit)
