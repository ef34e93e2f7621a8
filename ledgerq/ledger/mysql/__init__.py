"""The MySQL / MariaDB side of the storage seam (issue 29): :class:`MyLedger`,
the engines it runs on (PyMySQL, aiomysql), its own Alembic history and the
transaction-scoped part the producers use (:mod:`.tx`). The only part of
``ledger`` that imports PyMySQL.

What is built so far (docs/guarantees.md, "On MySQL and MariaDB"): enqueue in
the caller's transaction, the relay's batches (:mod:`.relay`), the worker's
claims, finish, heartbeat and checkpoints, its subscriptions and liveness, the
reconciler (its rescue of dead workers' and expired leases' tasks,
:mod:`.rescue`; its broker duties, :mod:`.reconcile`), retention
(:mod:`.retention`), the operator's side (:mod:`.operations`: list, find, act,
audit; :mod:`.operations_pauses`: pauses and rate limits, which the pick honours
(:mod:`.metering`: the token buckets), as it does ordering keys, and their
release, :mod:`.keys`; :mod:`.expiry`: tasks not started by their expiry), inspection
(:mod:`.inspection`: what ``ledgerq stats`` and ``ledgerq kinds list`` read),
the dashboard's reads (:mod:`.overview`) and its rollup (:mod:`.rollup`), the
ledger split across databases (each database's shard and id range:
:mod:`.shards`), dependencies between tasks (:mod:`.dependencies`: ``after=``),
fan-out (:mod:`.families`: ``parent_id``, ``on_children_done``), and the testing
protocol.
:class:`MyLedger` does not implement the whole
:class:`~ledgerq.ledger.protocol.Ledger` yet: the composition root hands it
only to what it serves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ledgerq.ledger.mysql.harness import MyHarness
from ledgerq.ledger.mysql.inspection import MyInspection
from ledgerq.ledger.mysql.operations import MyOperations
from ledgerq.ledger.mysql.operations_pauses import MyPauses
from ledgerq.ledger.mysql.overview import MyOverview
from ledgerq.ledger.mysql.reconcile import MyReconcile
from ledgerq.ledger.mysql.rescue import MyRescue
from ledgerq.ledger.mysql.retention import MyRetention
from ledgerq.ledger.mysql.rollup import MyRollup
from ledgerq.ledger.mysql.services import MyServices

if TYPE_CHECKING:
    from ledgerq.ledger.protocol import (
        DashboardLedger,
        DirectLedger,
        InspectionLedger,
        OperationsLedger,
        ReconcilerLedger,
        RelayLedger,
        RetentionLedger,
        RollupLedger,
        RoutingLedger,
        SchedulingLedger,
    )
    from ledgerq.ledger.split.ledger import OperatorLedger


class MyLedger(
    MyServices,
    MyRescue,
    MyReconcile,
    MyRetention,
    MyOperations,
    MyPauses,
    MyInspection,
    MyOverview,
    MyRollup,
    MyHarness,
):
    """The seam on MySQL / MariaDB, as far as it is built (the relay's, the
    worker's, the reconciler's and the operator's parts, retention, the
    dashboard's reads and rollup, and the testing protocol), over one aiomysql
    engine."""


if TYPE_CHECKING:
    # mypy checks MyLedger against the parts of the seam it implements
    _direct: type[DirectLedger] = MyLedger
    _routing: type[RoutingLedger] = MyLedger
    _retention: type[RetentionLedger] = MyLedger
    _operations: type[OperationsLedger] = MyLedger
    _inspection: type[InspectionLedger] = MyLedger
    _scheduling: type[SchedulingLedger] = MyLedger
    _operator: type[OperatorLedger] = MyLedger
    _relay: type[RelayLedger] = MyLedger
    _reconciler: type[ReconcilerLedger] = MyLedger
    _dashboard: type[DashboardLedger] = MyLedger
    _rollup: type[RollupLedger] = MyLedger


__all__ = ["MyLedger"]
