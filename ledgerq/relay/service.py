"""The relay: mark due ``pending`` rows ``published``, commit, then publish them.

Shaped like River's maintenance services: :class:`RelayConfig` validates its
defaults, :meth:`Relay.run_once` does one batch and returns counts (tests call
it directly), and :meth:`Relay.run` is the thin loop around it that wakes on
LISTEN/NOTIFY and also polls.

One batch: ``SELECT ... FOR UPDATE SKIP LOCKED`` the due rows each live broker
route's window has room for (``ledgerq_pick``, migration 0014: the scheduling
order of :mod:`ledgerq.ledger.scheduling`, aged first, then by priority, retries
behind, nothing paused, ordered keys one at a time, rate-limited kinds within
their token buckets), ``UPDATE`` them to ``published`` (fenced on their epoch,
with their route) and COMMIT, all in ``publish_due`` (one statement on
PostgreSQL); only then pack them into envelopes (several tasks of one route and
kind per message, :mod:`.envelopes`) and publish those with confirms. No row
lock is held while the broker works, so a worker whose delivery arrives at once
claims at once (before, it waited on the relay's locks until the
confirm came back and the marks committed: about 4 ms of the idle latency), and
a second relay skips the rows while they are picked.

A publish that fails while the relay is alive (nacked, returned as unroutable,
unconfirmed within ``confirm_timeout``, or the broker away before anything went
out) puts its rows back to ``pending`` at once, with a fenced compare-and-set
that bumps the epoch (``return_unpublished``). Returning, rather than
publishing again here, is chosen because (a) a broker that just refused or lost
a message is likely to do it again, and a relay retrying in place would spin on
it while the rows' places in the scheduling order (priority, aging, operators'
changes) stand still, whereas a pending row is picked again by the next batch in
that order; (b) it frees the route's window credit at once; (c) epoch + 1 makes
any copy that did reach the broker (an unconfirmed publish can still be
delivered) claim nothing, so the retried message is the only live one.

Races, written down:

* The relay dies (or is cancelled at stop) after its commit and before or during
  the publish: the rows are ``published`` with no message. The reconciler's
  stalled-delivery step re-publishes them under the same epoch once the queue's
  stall window has passed (``select_stalled``); nothing is lost, the task is
  late by that window. The same holds if returning the rows fails (the database
  went away too): they wait for the stall window.
* A delivery overtakes the relay's bookkeeping: the worker claims a row that is
  already committed ``published``; nothing waits.
* A worker claims a row whose confirm is then lost (the message was delivered):
  the claim moved the epoch and the status, so the return's compare-and-set
  skips that row and the task runs once.
* The reconciler re-publishes a row whose confirm is slow (longer than the stall
  window): two messages carry one epoch; the claim's fence lets one win. If the
  relay's publish then fails, the return bumps the epoch and both copies claim
  nothing; the next batch publishes the row again.
* A crash after the confirm loses nothing (the rows were committed first).
  Duplicates are possible after a crash, losses are not.

The window refills as workers claim: a claim wakes the relays (NOTIFY on its
commit). :meth:`Relay.run` goes round again at once only after a full batch; a
short one took all the windows had room for, so it waits for the next
notification (one that came during the batch ends the wait at once) or the poll.

A failed batch is handled by the rule every loop shares
(:mod:`ledgerq.ledger.outages`): a configuration or schema error ends the loop;
anything else (a lost connection, a database restart, a broker away) is logged
once per outage and tried again with back-off, never waiting longer than the
poll interval.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Protocol

from ledgerq.broker.base import Publisher, PublishOutcome
from ledgerq.broker.topology import MAX_ENVELOPE
from ledgerq.hooks import NO_HOOKS, Hooks
from ledgerq.ledger import tracing
from ledgerq.ledger.model import DueTask
from ledgerq.ledger.outages import Outage, ends_loop, pause
from ledgerq.ledger.protocol import RelayLedger
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, aging_param
from ledgerq.relay.envelopes import KindDurations, pack

log = logging.getLogger("ledgerq.relay")


class Wakeup(Protocol):
    async def wait(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for a sign that tasks were enqueued."""
        ...


@dataclass(frozen=True)
class RelayConfig:
    batch_size: int = 500
    #: Longest sleep between polls when no notification arrives.
    poll_interval: float = 1.0
    #: How long to wait for a publisher confirm before calling the publish failed.
    confirm_timeout: float = 10.0
    #: A task due this long is published first, at priority 9 (0: no aging); the
    #: setting LEDGERQ_PRIORITY_AGING_S (see ledgerq.ledger.scheduling).
    aging_s: float = DEFAULT_AGING_S
    #: Most tasks one message carries (relay/envelopes.py); 1: one per message.
    envelope_max: int = 64
    #: A kind whose attempts run this long on average travels one per message.
    envelope_long_s: float = 1.0
    #: Woken again this soon after a batch began, wait out the rest first: under
    #: load every claim notifies, and one batch then takes the room of several.
    #: An idle relay is woken long after its last batch and goes at once.
    coalesce_s: float = 0.005

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"batch_size must be 1..10000, got {self.batch_size}")
        if not 0.01 <= self.poll_interval <= 300:
            raise ValueError(f"poll_interval must be 0.01..300 s, got {self.poll_interval}")
        # A confirm this slow returns its rows to pending: keep it under the
        # reconciler's stall window, or the reconciler re-publishes them meanwhile.
        if not 0.1 <= self.confirm_timeout <= 60:
            raise ValueError(f"confirm_timeout must be 0.1..60 s, got {self.confirm_timeout}")
        aging_param(self.aging_s)  # ValueError if negative
        if not 1 <= self.envelope_max <= MAX_ENVELOPE:
            raise ValueError(f"envelope_max must be 1..{MAX_ENVELOPE}, got {self.envelope_max}")
        if self.envelope_long_s <= 0:
            raise ValueError(f"envelope_long_s must be positive, got {self.envelope_long_s}")
        if not 0 <= self.coalesce_s <= 1:
            raise ValueError(f"coalesce_s must be 0..1 s, got {self.coalesce_s}")


@dataclass
class RelayCounts:
    claimed: int = 0
    published: int = 0
    returned: int = 0
    nacked: int = 0
    failed: int = 0
    #: AMQP messages sent (an envelope carries several tasks).
    messages: int = 0
    elapsed_s: float = 0.0

    def add(self, other: RelayCounts) -> None:
        for name in (
            "claimed",
            "published",
            "returned",
            "nacked",
            "failed",
            "messages",
            "elapsed_s",
        ):
            setattr(self, name, getattr(self, name) + getattr(other, name))


@dataclass
class Relay:
    ledger: RelayLedger
    publisher: Publisher
    config: RelayConfig = field(default_factory=RelayConfig)
    #: The probe (fault points ``relay.*``) and the observer (publish counts).
    hooks: Hooks = NO_HOOKS
    totals: RelayCounts = field(default_factory=RelayCounts)
    #: Whether the last batch failed (the readiness probe reports it).
    failing: bool = False
    #: Failed batches, logged once per outage (:mod:`ledgerq.ledger.outages`).
    outage: Outage = field(default_factory=lambda: Outage("relay batch", log))
    #: Which kinds run long (their tasks travel one per message).
    durations: KindDurations = field(init=False)

    def __post_init__(self) -> None:
        self.durations = KindDurations(self.ledger.kind_durations, self.config.envelope_long_s)

    async def run_once(self) -> RelayCounts:
        """Publish one batch of due rows; return what happened to them."""
        started = time.perf_counter()
        counts = RelayCounts()
        # Read before the batch locks its rows (at most every few seconds).
        long = await self.durations.refresh() if self.config.envelope_max > 1 else frozenset()
        rows = await self.ledger.publish_due(self.config.batch_size, self.config.aging_s)
        # Committed: the rows are published in the ledger and no lock is held.
        if rows:
            self.hooks.probe("relay.after_commit")
            counts = await self._publish(rows, long)
        counts.elapsed_s = time.perf_counter() - started
        self.totals.add(counts)
        if counts.claimed and counts.published < counts.claimed:
            log.warning("relay batch: %s", counts)
        return counts

    async def _publish(self, rows: list[DueTask], long: frozenset[str]) -> RelayCounts:
        """Publish committed rows; return the failed ones to pending at once."""
        traced = any(r.trace_context is not None for r in rows)
        spans = tracing.PublishSpans(rows) if traced else None
        envelopes = pack(rows, self.config.envelope_max, long)
        try:
            sent = await self.publisher.publish_many(envelopes, self.config.confirm_timeout)
        except Exception:  # the broker away before anything went out: none was sent
            await self._return(rows)
            raise
        self.hooks.probe("relay.after_publish")
        tally: Counter[PublishOutcome] = Counter()
        failed: list[DueTask] = []
        for envelope, outcome in zip(envelopes, sent, strict=True):
            tally[outcome] += len(envelope)
            if outcome is not PublishOutcome.CONFIRMED:
                failed.extend(envelope)
        if spans is not None:
            by_id = {row.id: o for e, o in zip(envelopes, sent, strict=True) for row in e}
            spans.end([by_id[row.id].value for row in rows])
        if failed:
            await self._return(failed)
        counts = RelayCounts(
            claimed=len(rows),
            published=tally[PublishOutcome.CONFIRMED],
            returned=tally[PublishOutcome.RETURNED],
            nacked=tally[PublishOutcome.NACKED],
            failed=tally[PublishOutcome.FAILED],
            messages=len(envelopes),
        )
        self.hooks.observer.published(
            counts.published, counts.returned, counts.nacked, counts.failed
        )
        return counts

    async def _return(self, rows: list[DueTask]) -> None:
        """Failed publishes back to pending (epoch + 1); if the database is away as
        well, the reconciler's stalled-delivery step re-publishes them later."""
        try:
            await self.ledger.return_unpublished(rows)
        except Exception as exc:
            log.warning(
                "returning %d unpublished tasks to pending failed (%s); the reconciler "
                "re-publishes them after the stall window",
                len(rows),
                exc,
            )

    async def run(self, stop: asyncio.Event, wakeup: Wakeup) -> None:
        """Loop until ``stop`` is set: drain due rows, then sleep until woken or polled."""
        log.info(
            "relay running (batch %d, poll %.2fs)",
            self.config.batch_size,
            self.config.poll_interval,
        )
        began = 0.0
        while not stop.is_set():
            wait = began + self.config.coalesce_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            began = time.monotonic()
            try:
                counts = await self.run_once()
                self.failing = False
                self.outage.succeeded()
            except Exception as exc:
                if ends_loop(exc):  # no table comes back and no setting is fixed by retrying
                    raise
                # A lost connection, a database restarting, a broker away: one line per
                # outage, back off (never longer than the poll interval), go on.
                self.failing = True
                await pause(stop, min(self.outage.failed(exc), self.config.poll_interval))
                continue
            if counts.claimed >= self.config.batch_size:
                continue  # more may be due right now
            # A short batch took all the windows had room for: what frees more
            # room (a claim) or brings more work (an enqueue) notifies, and a
            # notification that came during the batch ends this wait at once.
            await wakeup.wait(self.config.poll_interval)
        log.info("relay stopped: %s", self.totals)
