"""The relay: move due ``pending`` rows to RabbitMQ, marking only confirmed ones.

Shaped like River's maintenance services: :class:`RelayConfig` validates its
defaults, :meth:`Relay.run_once` does one batch and returns counts (tests call
it directly), and :meth:`Relay.run` is the thin loop around it that wakes on
LISTEN/NOTIFY and also polls.

One batch: ``SELECT ... FOR UPDATE SKIP LOCKED`` the due rows each live broker
route's window has room for (``ledgerq_pick``, migration 0014: the scheduling
order of :mod:`ledgerq.ledger.scheduling`, aged first, then by priority, retries
behind, nothing paused, ordered keys one at a time, rate-limited kinds within
their token buckets), pack them into envelopes (several tasks of one route and
kind per message, :mod:`.envelopes`), publish those with confirms, ``UPDATE``
the confirmed rows to ``published`` (with their route), commit. The row locks
are held through the publish, so a consumer that receives a message before the
commit waits for it; a second relay skips the locked rows. A returned, nacked or
unconfirmed message leaves all its rows ``pending`` for the next batch:
duplicates are possible after a crash, losses are not.

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

from ledgerq.ledger import tracing
from ledgerq.ledger.observer import NO_OBSERVER, Observer
from ledgerq.ledger.outages import Outage, ends_loop, pause
from ledgerq.ledger.protocol import RelayLedger
from ledgerq.ledger.scheduling import DEFAULT_AGING_S, aging_param
from ledgerq.relay.broker.base import Publisher, PublishOutcome
from ledgerq.relay.broker.topology import MAX_ENVELOPE
from ledgerq.relay.envelopes import KindDurations, pack
from ledgerq.relay.probes import Probe, no_probe

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
        # The batch's transaction stays open while confirms arrive: keep this well
        # under the connection's idle-in-transaction timeout.
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
    probe: Probe = no_probe
    totals: RelayCounts = field(default_factory=RelayCounts)
    observer: Observer = NO_OBSERVER
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
        async with self.ledger.publish_batch(self.config.batch_size, self.config.aging_s) as batch:
            if batch.rows:
                traced = any(r.trace_context is not None for r in batch.rows)
                spans = tracing.PublishSpans(batch.rows) if traced else None
                envelopes = pack(batch.rows, self.config.envelope_max, long)
                sent = await self.publisher.publish_many(envelopes, self.config.confirm_timeout)
                by_id = {row.id: o for e, o in zip(envelopes, sent, strict=True) for row in e}
                outcomes = [by_id[row.id] for row in batch.rows]
                if spans is not None:
                    spans.end([o.value for o in outcomes])
                self.probe("relay.after_publish")
                confirmed = [
                    row
                    for row, o in zip(batch.rows, outcomes, strict=True)
                    if o is PublishOutcome.CONFIRMED
                ]
                marked = await batch.mark_published(confirmed)
                tally = Counter(outcomes)
                counts = RelayCounts(
                    claimed=len(batch.rows),
                    published=len(marked),
                    returned=tally[PublishOutcome.RETURNED],
                    nacked=tally[PublishOutcome.NACKED],
                    failed=tally[PublishOutcome.FAILED],
                    messages=len(envelopes),
                )
                self.observer.published(
                    counts.published, counts.returned, counts.nacked, counts.failed
                )
        counts.elapsed_s = time.perf_counter() - started
        self.totals.add(counts)
        if counts.claimed and counts.published < counts.claimed:
            log.warning("relay batch: %s", counts)
        return counts

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
