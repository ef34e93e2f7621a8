"""Periodic tasks: ``@task("report", every=300)`` or ``@task("report", cron="*/5 * * * *")``.

Every worker whose registry has periodic kinds runs a :class:`PeriodicEnqueuer`
(River's periodic job enqueuer, shaped like the other services: a validated
:class:`PeriodicConfig`, :meth:`PeriodicEnqueuer.run_once` returning counts,
:meth:`PeriodicEnqueuer.run` the thin loop). There is no leader to elect: every
enqueuer tries to enqueue the same task for the same period, and the ledger lets
exactly one through.

**Why in the worker, not in the reconciler's maintenance loop**
(:mod:`ledgerq.relay.maintenance`, whose services have this same shape): the
schedules are the worker's registry, which only a process given ``--app`` has
(``ledgerq reconcile`` takes none), and docs/howto.md ("Run a task
periodically") promises that every worker whose app has periodic kinds
enqueues them, so a deployment of relays and workers without a reconciler (it
is a cron job, and optional) still gets its periodic tasks. Moving it into the
loop that holds the advisory lock would break that promise and buy nothing the
ledger does not already give: the permanent key, not a lock or a leader,
makes one task per period.

Contract:

* **One task per period**, however many workers run. A period is named by its
  start (UTC): ``every=N`` periods are aligned to multiples of N seconds since
  the Unix epoch, so every process computes the same starts; a cron period
  starts at each time the expression matches (UTC). The task is enqueued with
  ``once=True`` under the business key ``periodic:<start ISO 8601>``: the
  permanent key (``ledgerq_unique_keys``, primary key (kind, key)) is taken in
  the enqueuing transaction, so of several enqueuers racing on one period the
  first to commit inserts the task and the others insert nothing (they wait on
  the key's index entry, then see it taken). No check-then-insert.
* **After an outage** (no worker running for several periods) only the most
  recent period is enqueued, once: an enqueuer only ever tries the latest
  period that has started, never the ones before it. With ``catch_up="none"``
  (``LEDGERQ_PERIODIC_CATCH_UP=none``) a period is enqueued only within
  ``late_s`` of its start, so periods missed by an outage are skipped entirely.
* Each enqueue goes through the ledger like any other task: the relay
  publishes it, a worker runs it, retries and dead letters apply. The payload
  is ``{"period": "<start ISO 8601>"}``.

* **A lost database** (a terminated connection, a restart) is an outage, by
  the rule every loop shares (:mod:`ledgerq.ledger.outages`): the pass is tried
  again with back-off, one log line per outage, and the first pass that works
  enqueues the latest period as after any outage (above). Only a configuration
  or schema error ends the enqueuer, with one line; in a worker, a lost schema
  then stops the worker too (``ledgerq.compose.scheduling``).

Races: clocks. Each enqueuer reads its own clock; near a period boundary one
whose clock runs ahead enqueues the new period a little early, and one behind
tries the old period again (a no-op). Keep the workers' clocks in sync (NTP);
a skew only moves when a period's task is enqueued, never how many.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, Protocol

from cronsim import CronSim, CronSimError

from ledgerq.core.errors import first_line
from ledgerq.ledger.outages import Outage, ends_loop, pause
from ledgerq.ledger.specs import TaskSpec

log = logging.getLogger("ledgerq.periodic")

CatchUp = Literal["latest", "none"]
KEY_PREFIX = "periodic:"


class ScheduleError(ValueError):
    """``every`` or ``cron`` cannot be used (the registry turns it into RegistryError)."""


@dataclass(frozen=True)
class Schedule:
    """When ``kind`` is due: every ``every`` seconds, or at each ``cron`` match."""

    kind: str
    every: float | None = None
    cron: str | None = None
    queue: str = "default"

    def __post_init__(self) -> None:
        if (self.every is None) == (self.cron is None):
            raise ScheduleError(f"{self.kind!r}: give every= or cron=, not both")
        if self.every is not None and (
            isinstance(self.every, bool)
            or not isinstance(self.every, int | float)
            or not math.isfinite(self.every)
            or self.every < 1
        ):
            raise ScheduleError(
                f"{self.kind!r}: every must be at least 1 second, got {self.every!r}"
            )
        if self.cron is not None:
            try:
                CronSim(self.cron, datetime.now(UTC))
            except (CronSimError, TypeError) as exc:
                raise ScheduleError(f"{self.kind!r}: bad cron {self.cron!r}: {exc}") from exc

    def latest_start(self, now: datetime) -> datetime:
        """The start of the most recent period that has begun at ``now`` (UTC)."""
        if self.every is not None:
            epoch = now.timestamp()
            return datetime.fromtimestamp(epoch - math.fmod(epoch, self.every), UTC)
        assert self.cron is not None
        # reverse iteration yields matches strictly before its start: look from just after now
        start = next(iter(CronSim(self.cron, now + timedelta(microseconds=1), reverse=True)))
        return start.astimezone(UTC)

    def task(self, start: datetime) -> TaskSpec:
        """The one task of the period that began at ``start``."""
        period = start.astimezone(UTC).isoformat()
        return TaskSpec(
            self.kind,
            {"period": period},
            queue=self.queue,
            business_key=KEY_PREFIX + period,
            once=True,
        )


class PeriodicLedger(Protocol):
    async def enqueue(self, specs: Sequence[TaskSpec]) -> list[int]:
        """Insert ``specs`` in one committed transaction; the ids inserted (a
        ``once=True`` spec whose key is taken inserts nothing)."""
        ...


@dataclass(frozen=True)
class PeriodicConfig:
    #: Seconds between passes (a period's task is enqueued within this of its start).
    interval_s: float = 1.0
    #: ``latest``: after an outage, the latest missed period runs once; ``none``: skipped.
    catch_up: CatchUp = "latest"
    #: With ``catch_up="none"``, how late after its start a period is still enqueued.
    late_s: float = 60.0

    def __post_init__(self) -> None:
        if not 0.05 <= self.interval_s <= 60:
            raise ValueError(f"interval_s must be 0.05..60 s, got {self.interval_s}")
        if self.catch_up not in ("latest", "none"):
            raise ValueError(f"catch_up must be 'latest' or 'none', got {self.catch_up!r}")
        if not self.interval_s <= self.late_s:
            raise ValueError(f"late_s must be at least interval_s, got {self.late_s}")


@dataclass
class PeriodicCounts:
    #: Schedules whose latest period was tried (not skipped as too late).
    tried: int = 0
    #: Tasks this pass inserted (0 for a period another enqueuer already took).
    enqueued: int = 0
    #: Periods skipped because they began more than ``late_s`` ago (catch_up "none").
    skipped: int = 0


@dataclass
class PeriodicEnqueuer:
    ledger: PeriodicLedger
    schedules: Sequence[Schedule]
    config: PeriodicConfig = field(default_factory=PeriodicConfig)
    clock: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    #: Failed passes, logged once per outage.
    outage: Outage = field(default_factory=lambda: Outage("periodic enqueue", log), repr=False)
    #: The period each schedule last tried, so a pass tries each period once.
    _tried: dict[str, datetime] = field(default_factory=dict, repr=False)

    async def run_once(self) -> PeriodicCounts:
        """Try the latest period of every schedule not tried yet; return the counts."""
        now = self.clock()
        counts = PeriodicCounts()
        specs: list[TaskSpec] = []
        starts: dict[str, datetime] = {}
        for schedule in self.schedules:
            start = schedule.latest_start(now)
            if self._tried.get(schedule.kind) == start:
                continue
            late = (now - start).total_seconds() > self.config.late_s
            if self.config.catch_up == "none" and late:
                counts.skipped += 1
                self._tried[schedule.kind] = start
                continue
            specs.append(schedule.task(start))
            starts[schedule.kind] = start
        if specs:
            inserted = await self.ledger.enqueue(specs)
            counts.tried, counts.enqueued = len(specs), len(inserted)
            self._tried.update(starts)  # only once the enqueue committed
            if inserted:
                log.info("periodic: enqueued %d of %d due periods", len(inserted), len(specs))
        return counts

    async def run(self, stop: asyncio.Event) -> None:
        """Loop until ``stop``: a pass every ``interval_s``. A failed pass (its periods
        were not marked tried) is retried with back-off and logged once per outage; a
        configuration or schema error ends the loop (:mod:`ledgerq.ledger.outages`)."""
        while not stop.is_set():
            wait = self.config.interval_s
            try:
                await self.run_once()
                self.outage.succeeded()
            except Exception as exc:
                if ends_loop(exc):
                    log.error("periodic enqueuer stopped: %s", first_line(exc))
                    raise
                wait = self.outage.failed(exc)
            await pause(stop, wait)
