"""The reconciler's duties, each a maintenance service of its own.

Shaped like River's maintenance services and Oban's plugins: each module holds
one duty, a frozen ``*Config`` that validates its fields when built, and a
service whose ``run_once()`` does one pass and returns that duty's counts
(:class:`~.base.Service`). The tests call each ``run_once()`` directly against
the real database. One loop runs them all: :class:`ledgerq.relay.reconciler.Reconciler`
holds the advisory lock around the locked services, in this order, then runs
the upkeep services after releasing it:

========================  ==================================  =========================
service                   duty                                runs
========================  ==================================  =========================
:mod:`.rescue`            dead workers' and expired leases'   under the lock
                          running rows judged (crash
                          attribution), dead ones alerted
:mod:`.unserved`          published rows of routes nobody     under the lock
                          serves back to pending
:mod:`.stalled`           published rows nobody claimed       under the lock
                          within their stall window published
                          again
:mod:`.overdue`           due rows no relay published,        under the lock
                          published as a relay would
:mod:`ledgerq.relay.rollup`  finished tasks counted per minute  after the lock
:mod:`ledgerq.relay.retention`  history's day partitions made   after the lock
                          and dropped
========================  ==================================  =========================

The periodic enqueuer (:mod:`ledgerq.consumers.periodic`) has the same shape
but runs in every worker, not in this loop: its schedules are the worker's
registry (its ``--app``), and a deployment without a reconciler must still get
its periodic tasks (docs/howto.md, "Run a task periodically").
"""

from ledgerq.relay.maintenance.base import PublishCounts, Service
from ledgerq.relay.maintenance.overdue import Overdue, OverdueConfig
from ledgerq.relay.maintenance.rescue import RescueConfig, RescueCounts, Rescuer
from ledgerq.relay.maintenance.stalled import Stalled, StalledConfig
from ledgerq.relay.maintenance.unserved import Unserved, UnservedConfig, UnservedCounts

__all__ = [
    "Overdue",
    "OverdueConfig",
    "PublishCounts",
    "RescueConfig",
    "RescueCounts",
    "Rescuer",
    "Service",
    "Stalled",
    "StalledConfig",
    "Unserved",
    "UnservedConfig",
    "UnservedCounts",
]
