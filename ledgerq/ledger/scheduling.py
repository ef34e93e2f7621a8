"""Scheduling rules the ledger decides (issue 14): priorities with aging, pauses,
rate limits per kind. The relay applies them in one statement (``select_due``
in ``queries.sql``); this module holds their values and their validation.

Contract:

* **Priority** 0-9, higher first, in the relay's order and in the broker's
  (classic queues with ``x-max-priority`` 9, the message carrying the
  priority). A retried task goes behind the never-run tasks of its priority.
* **Aging**: a task due for ``LEDGERQ_PRIORITY_AGING_S`` (default 300 s) or
  longer is published before every non-aged task, oldest first, at priority 9.
  So under any stream of higher-priority work a task starts within about the
  aging time plus the drain of the tasks that aged before it. 0 turns aging off.
* **Pause** of a queue or a kind: a row in ``ledgerq_pauses``, so it survives
  restarts. The relay and the reconciler publish nothing paused; pausing also
  takes back what was published and not yet claimed (epoch bumped: the
  message in RabbitMQ is stale and acked unrun). A running task runs on.
* **Rate limit** of a kind: a token bucket in ``ledgerq_kinds``, refilled at
  ``rate_per_s`` up to ``burst`` tokens, metered by the relays (one task
  published per token). A bucket is locked by one relay's batch at a time
  (SKIP LOCKED), so several relays share it without taking a token twice; the
  waiting tasks stay ``pending`` in the ledger.

A rate limit set or removed by an operator (``ledgerq kinds limit``) is written
with its audit record in the operator's one transaction (:func:`write_limit`,
each ledger's statement and audit writer); a pause or resume likewise, with its
take-back and audit record (:class:`Pausing`).

Races: a pause and a relay batch in flight. The batch that read the pause list
before the pause committed may still publish; the pause's take-back runs after
and skips rows a relay holds locked (SKIP LOCKED), so ``pause`` reports how
many it took back, and a row published by a batch that was already in flight
may still run. Resume needs no race handling: the next batch publishes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import ClassVar, Literal

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger.audit import AuditWriter
from ledgerq.ledger.validation import check_name

#: Default of ``LEDGERQ_PRIORITY_AGING_S``.
DEFAULT_AGING_S = 300.0
#: What ``select_due`` gets for "aging off": no task is due for 30 years.
_NEVER_S = 1e9

Scope = Literal["queue", "kind"]
SCOPES: tuple[Scope, ...] = ("queue", "kind")

_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*/\s*(s|sec|second|m|min|minute|h|hour)\s*")
_PER = {"s": 1.0, "m": 60.0, "h": 3600.0}


def aging_param(aging_s: float) -> float:
    """The ``:aging_s`` of ``select_due``: 0 (off) becomes "never"."""
    if aging_s < 0:
        raise ValueError(f"aging must be 0 (off) or a positive number of seconds, got {aging_s}")
    return aging_s if aging_s > 0 else _NEVER_S


@dataclass(frozen=True, slots=True)
class RateLimit:
    """At most ``rate_per_s`` tasks of a kind per second on average, and ``burst``
    at once after a quiet spell."""

    rate_per_s: float
    burst: float

    @classmethod
    def parse(cls, text: object, burst: float | None = None) -> RateLimit:
        """``"20/s"``, ``"100/m"``, ``"10/h"``. The bucket holds one second's worth
        (at least one token) unless ``burst`` says otherwise: the relay polls about
        once a second, so a smaller bucket would cap the rate at what one poll finds.
        Raises :class:`InvalidTaskError` naming the expected form."""
        match = _RATE.fullmatch(text) if isinstance(text, str) else None
        if match is None or float(match.group(1)) <= 0:
            raise InvalidTaskError(
                f"rate_limit must look like '20/s', '100/m' or '10/h' (a positive number "
                f"per second, minute or hour), got {text!r}"
            )
        rate = float(match.group(1)) / _PER[match.group(2)[0]]
        if burst is None:
            burst = max(1.0, rate)
        if not math.isfinite(burst) or burst < 1:
            raise InvalidTaskError(f"burst must be at least 1 task, got {burst!r}")
        return cls(rate, float(burst))

    def __str__(self) -> str:
        return f"{self.rate_per_s:g}/s (burst {self.burst:g})"


def check_scope(scope: object, name: object) -> tuple[Scope, str]:
    """A pause's target, validated like a task's queue or kind."""
    if scope not in SCOPES:
        raise InvalidTaskError(f"a pause names a queue or a kind, got {scope!r}")
    return scope, check_name(name, str(scope))


@dataclass(frozen=True, slots=True)
class PauseReport:
    """What ``pause`` or ``resume`` did: ``changed`` is False when the queue or kind
    already was (or was not) paused; ``unpublished`` the published tasks a pause
    took back into the ledger; ``audit_id`` the audit record (None if unchanged)."""

    action: Literal["pause", "resume"]
    scope: Scope
    name: str
    changed: bool
    unpublished: int = 0
    audit_id: int | None = None

    def to_json(self) -> dict[str, object]:
        return {
            "action": self.action,
            "scope": self.scope,
            "name": self.name,
            "changed": self.changed,
            "unpublished": self.unpublished,
            "audit_id": self.audit_id,
        }


#: A ledger's take-back of a paused queue's or kind's published tasks, in ``conn``'s
#: transaction (binds ``scope``, ``name``): the ids taken back.
TakeBack = Callable[[AsyncConnection, Mapping[str, str]], Awaitable[list[int]]]


@dataclass(frozen=True)
class PauseWrites:
    """A ledger's side of :class:`Pausing`: its statements
    ``pause`` and ``resume`` (binding ``scope``, ``name``; 0 rows when nothing
    changed), its take-back, its audit writer and its driver errors' translation."""

    pause: TextClause
    resume: TextClause
    take_back: TakeBack
    record_audit: AuditWriter
    translated: Callable[[], AbstractContextManager[None]]


class Pausing:
    """``pause`` and ``resume`` for a ledger class with an ``engine`` and its
    :class:`PauseWrites` (class attribute ``pause_writes``): each one transaction
    on ``engine``, the target validated before it begins."""

    engine: AsyncEngine
    pause_writes: ClassVar[PauseWrites]

    async def pause(
        self, scope: Scope, name: str, *, actor: str, reason: str | None = None
    ) -> PauseReport:
        """The pause row (a pause already in force writes nothing more and is not
        audited), the take-back, and the audit record with each task taken back."""
        scope, name = check_scope(scope, name)
        where = {"scope": scope, "name": name}
        writes = self.pause_writes
        with writes.translated():
            async with self.engine.begin() as conn:
                taken = await conn.execute(
                    writes.pause, {**where, "actor": actor, "reason": reason}
                )
                if taken.rowcount == 0:
                    return PauseReport("pause", scope, name, changed=False)
                ids = await writes.take_back(conn, where)
                audit_id = await writes.record_audit(
                    conn, "pause", {scope: name}, actor=actor, reason=reason, task_ids=ids
                )
        return PauseReport("pause", scope, name, True, len(ids), audit_id)

    async def resume(self, scope: Scope, name: str, *, actor: str) -> PauseReport:
        """The pause lifted, with its audit record (no pause: nothing written, not
        audited)."""
        scope, name = check_scope(scope, name)
        writes = self.pause_writes
        with writes.translated():
            async with self.engine.begin() as conn:
                lifted = await conn.execute(writes.resume, {"scope": scope, "name": name})
                if lifted.rowcount == 0:
                    return PauseReport("resume", scope, name, changed=False)
                audit_id = await writes.record_audit(conn, "resume", {scope: name}, actor=actor)
        return PauseReport("resume", scope, name, True, 0, audit_id)


async def write_limit(
    conn: AsyncConnection,
    statement: TextClause,
    record_audit: AuditWriter,
    kind: str,
    limit: RateLimit | None,
    *,
    actor: str,
) -> None:
    """Set ``kind``'s rate limit (None: remove it) in ``conn``'s transaction, with
    its audit record (action ``set-limit``, options the limit): ``statement`` is the
    ledger's ``set_limit`` (binds ``kind``, ``rate``, ``burst``), ``record_audit`` its
    audit writer. The kind is validated before any statement runs."""
    kind = check_name(kind, "kind")
    rate = None if limit is None else limit.rate_per_s
    burst = None if limit is None else limit.burst
    await conn.execute(statement, {"kind": kind, "rate": rate, "burst": burst})
    options = {"rate_per_s": rate, "burst": burst}
    await record_audit(conn, "set-limit", {"kind": kind}, actor=actor, options=options)
