"""The reconciler: the ledger's safety net under the broker, run as a cron job.

It is one maintenance loop over the services of :mod:`ledgerq.relay.maintenance`,
each a duty with a validated config and a ``run_once()`` that returns counts
(River's maintenance services, Oban's plugins). One pass, under a PostgreSQL
advisory lock so only one reconciler acts at a time:

0. **Expiry** (:mod:`~ledgerq.relay.expiry`): queued tasks whose
   ``expires_at`` passed end cancelled, marked expired (first, so the steps
   below never publish them).
1. **Rescue** (:mod:`~ledgerq.relay.rescue`): the running rows of
   workers presumed dead (their liveness beats stopped), then expired leases,
   judged by crash attribution (charged alone, released as suspects with
   others) and finished, fenced.
2. **Unserved deliveries** (:mod:`~ledgerq.relay.unserved`): a
   ``published`` row whose route no live worker serves goes back to ``pending``,
   its epoch bumped, audited.
3. **Stalled deliveries** (:mod:`~ledgerq.relay.stalled`): a
   ``published`` row nobody claimed within its stall window, on a served route,
   is published again under the same epoch.
4. **Overdue pending rows** (:mod:`~ledgerq.relay.overdue`): due rows
   no relay published within the stall window are published here instead,
   exactly as a relay would.
4b. **Waiting tasks** (:mod:`~ledgerq.relay.dependencies`): a task enqueued
   with ``after`` whose dependencies have all ended but which is still waiting
   (its release missed) is released or cancelled.

Tasks that end ``dead`` in step 1 are alerted after the pass, once the lock is
released, so a slow alert hook never holds the lock; ``run_once`` returns when
the alerts are sent or have met their deadlines (``elapsed_s`` is the locked pass).
A pass that fails part-way (its connection lost) still alerts the tasks it
committed dead before it raises.

5. **Rollup** (when the reconciler has a :class:`~ledgerq.relay.rollup.Rollup`),
   after the lock is released: the tasks finished since the last pass are
   counted per minute for the dashboard (safe to run twice at once).
6. **Retention** (when the reconciler has a :class:`~ledgerq.relay.retention.Retention`),
   after the lock too, after the rollup, and only by the reconciler that held
   it: history's upcoming day partitions are created and expired ones dropped
   (safe to run twice at once).

An upkeep pass (5, 6) that fails with a lost connection, or a drop that waited
too long for its lock, is logged and tried again next pass; the locked steps
are not.

Races between the services are settled by their order within one pass and by
the lock: rescue lapses dead workers' subscriptions before unserved reads which
routes are served; unserved takes rows back before stalled would publish them
to nobody. Between reconcilers, the lock: a second one does nothing and says
so. Each service's races with relays and workers are in its own docstring.

:class:`ReconcilerConfig` is the command's options; it validates them by
building each locked service's config (:meth:`ReconcilerConfig.rescue` and the
others). A failed pass raises; the loop around it (``ledgerq reconcile
--every``, :func:`ledgerq.compose.serve_reconciler`) lives through a lost
database by the rule every loop shares (:mod:`ledgerq.ledger.outages`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeVar

from ledgerq.alerting.alerts import AlertSender
from ledgerq.broker.base import Publisher
from ledgerq.core.errors import TransientStorageError
from ledgerq.hooks import NO_HOOKS, Hooks
from ledgerq.ledger.model import Finished
from ledgerq.ledger.protocol import ReconcilerLedger
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.relay.dependencies import Dependencies, DependenciesConfig
from ledgerq.relay.expiry import Expiry, ExpiryConfig
from ledgerq.relay.overdue import Overdue, OverdueConfig
from ledgerq.relay.rescue import RescueConfig, Rescuer
from ledgerq.relay.retention import Retention, RetentionCounts
from ledgerq.relay.rollup import Rollup, RollupCounts
from ledgerq.relay.stalled import Stalled, StalledConfig
from ledgerq.relay.unserved import Unserved, UnservedConfig

log = logging.getLogger("ledgerq.reconciler")

#: How long a pass waits, after releasing its lock, for its dead-task alerts.
ALERTS_WAIT_S = 30.0


@dataclass(frozen=True)
class ReconcilerConfig(StalledConfig):
    """The command's options: the stalled service's (``stall_s``, ``queue_stall_s``,
    ``page_size``, ``confirm_timeout``, validated as it validates them; the other
    services take what they need of them), then the fields below."""

    #: An expired lease is judged once all its worker's leases ran out, or once
    #: it has been expired this long, whichever comes first.
    settle_s: float = 60.0
    #: As the relay's: the overdue step picks by the relay's rule, aging included
    #: (LEDGERQ_PRIORITY_AGING_S).
    aging_s: float = DEFAULT_AGING_S

    def __post_init__(self) -> None:
        super().__post_init__()  # each service's config validates its own fields
        self.rescue()

    def rescue(self) -> RescueConfig:
        return RescueConfig(page_size=self.page_size, settle_s=self.settle_s)

    def unserved(self) -> UnservedConfig:
        return UnservedConfig(page_size=self.page_size)

    def expiry(self) -> ExpiryConfig:
        return ExpiryConfig(page_size=self.page_size)

    def stalled(self) -> StalledConfig:
        return StalledConfig(self.stall_s, self.queue_stall_s, self.page_size, self.confirm_timeout)

    def overdue(self) -> OverdueConfig:
        return OverdueConfig(self.stall_s, self.aging_s, self.page_size, self.confirm_timeout)


@dataclass
class ReconcileCounts:
    acted: bool = True
    republished: int = 0
    overdue_published: int = 0
    unpublished: int = 0
    #: Queued tasks ended cancelled because their expiry passed (relay/expiry.py).
    expired_tasks: int = 0
    expired: int = 0
    #: Of ``expired``: rows of workers presumed dead, taken before their leases ran out.
    orphaned: int = 0
    dead: int = 0
    released: int = 0
    unconfirmed: int = 0
    pages: int = 0
    #: Waiting tasks whose missed release this pass made (should stay 0).
    waiting_moved: int = 0
    elapsed_s: float = 0.0
    retention: RetentionCounts | None = None
    rollup: RollupCounts | None = None

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["elapsed_s"] = round(self.elapsed_s, 4)
        data["retention"] = None if self.retention is None else self.retention.as_dict()
        data["rollup"] = None if self.rollup is None else self.rollup.as_dict()
        return data

    def line(self) -> str:
        if not self.acted:
            return "reconcile: another reconciler holds the lock; this one did nothing"
        return (
            f"reconcile: took back {self.unpublished} from unserved routes, "
            f"re-published {self.republished} stalled, published "
            f"{self.overdue_published} overdue, expired {self.expired} leases "
            f"({self.orphaned} of dead workers, {self.dead} dead, "
            f"{self.released} released as suspects), "
            f"{self.unconfirmed} unconfirmed, {self.waiting_moved} missed releases, "
            f"{self.expired_tasks} tasks past their expiry cancelled, "
            f"{self.pages} pages "
            f"in {self.elapsed_s * 1000:.0f} ms"
        ) + "".join("; " + c.line() for c in (self.rollup, self.retention) if c is not None)


T = TypeVar("T")


async def _upkeep(name: str, step: Callable[[], Awaitable[T]] | None) -> T | None:
    """An upkeep pass after the lock (rollup, retention): a lost connection is
    logged and the pass tried again next time."""
    if step is None:
        return None
    try:
        return await step()
    except TransientStorageError as exc:
        log.warning("%s pass failed (%s); tried again next pass", name, exc)
        return None


@dataclass
class Reconciler:
    """The maintenance loop's one pass: the locked services in order, then the
    alerts and the upkeep services (see the module docstring)."""

    ledger: ReconcilerLedger
    publisher: Publisher
    config: ReconcilerConfig = field(default_factory=ReconcilerConfig)
    #: The alert hook hears of the tasks a pass buried (``dead``).
    hooks: Hooks = NO_HOOKS
    retention: Retention | None = None
    rollup: Rollup | None = None
    rescuer: Rescuer = field(init=False)
    unserved: Unserved = field(init=False)
    expiry: Expiry = field(init=False)
    stalled: Stalled = field(init=False)
    overdue: Overdue = field(init=False)
    dependencies: Dependencies = field(init=False)

    def __post_init__(self) -> None:
        cfg = self.config
        self.rescuer = Rescuer(self.ledger, cfg.rescue())
        self.unserved = Unserved(self.ledger, cfg.unserved())
        self.expiry = Expiry(self.ledger, cfg.expiry())
        self.stalled = Stalled(self.ledger, self.publisher, cfg.stalled())
        self.overdue = Overdue(self.ledger, self.publisher, cfg.overdue())
        self.dependencies = Dependencies(self.ledger, DependenciesConfig(cfg.page_size))

    async def run_once(self) -> ReconcileCounts:
        started = time.perf_counter()
        try:
            async with self.ledger.exclusive() as acquired:
                if not acquired:
                    log.info("another reconciler holds the lock; skipping this pass")
                    return ReconcileCounts(acted=False, elapsed_s=time.perf_counter() - started)
                counts = await self._locked()
        except Exception:
            # The pass failed (a lost connection, say) after some tasks ended dead and
            # were committed: they are alerted all the same, then the error goes on.
            await self._send_alerts(self.rescuer.take_buried())
            raise
        counts.elapsed_s = time.perf_counter() - started
        await self._send_alerts(self.rescuer.take_buried())
        counts.rollup = await _upkeep(
            "rollup", None if self.rollup is None else self.rollup.run_once
        )
        counts.retention = await _upkeep(
            "retention", None if self.retention is None else self.retention.run_once
        )
        return counts

    async def _locked(self) -> ReconcileCounts:
        """The services that run under the lock, in order, their counts summed."""
        expiry = await self.expiry.run_once()
        rescue = await self.rescuer.run_once()
        unserved = await self.unserved.run_once()
        stalled = await self.stalled.run_once()
        overdue = await self.overdue.run_once()
        waiting = await self.dependencies.run_once()
        return ReconcileCounts(
            republished=stalled.published,
            overdue_published=overdue.published,
            unpublished=unserved.unpublished,
            expired_tasks=expiry.expired,
            expired=rescue.expired,
            orphaned=rescue.orphaned,
            dead=rescue.dead,
            released=rescue.released,
            unconfirmed=stalled.unconfirmed + overdue.unconfirmed,
            pages=rescue.pages + stalled.pages + overdue.pages,
            waiting_moved=waiting.released + waiting.cancelled,
        )

    async def _send_alerts(self, dead: list[Finished]) -> None:
        """After the pass, outside the lock: each alert within its deadline, a few at
        a time, and all of them within :data:`ALERTS_WAIT_S`."""
        if not dead:
            return
        sender = AlertSender(self.hooks.alert)
        for row in dead:
            sender.submit(row)
        await sender.close(ALERTS_WAIT_S)
