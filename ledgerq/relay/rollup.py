"""The dashboard's rollup: finished tasks counted per minute, so the overview
reads a small table instead of scanning history.

:meth:`Rollup.run_once` is part of the reconciler's upkeep, after its locked
steps (like :mod:`~ledgerq.relay.retention`): it calls the ``roll_up`` step
(``overview.sql``) until the mark is ``settle_s`` behind now or ``budget_s`` is
spent (on MySQL / MariaDB, :mod:`ledgerq.ledger.mysql.rollup`: the same step in
MySQL's SQL). Each step counts the tasks that finished in the next span of at most
``max_span_s`` -- per (minute, queue, kind, status, error) and per (minute,
queue, kind, hop, latency bucket), see migration 0008 -- and moves the mark past
them in the same transaction, so a step is counted whole or not at all and a
pass interrupted half-way loses nothing. A span in which nothing finished is
skipped (the step starts at the next finished task's minute), so an idle
ledger costs one cheap step per pass. The first pass starts ``backfill_s``
ago (history older than that is not charted); a ledger whose reconciler has
been off catches up ``budget_s`` of work per pass.

Races. Two passes at once are serialised by the state row's lock: the second
finds the span done. ``finish`` writes ``finished_at = now()``, the start of its
transaction, and commits a little later: a task whose transaction committed
more than ``settle_s`` after it began (a finish is one short statement) would
land behind the mark and never be counted -- the overview would miss it, the
ledger would not. A retried dead task that ends again is counted again (it
finished twice). Retention drops history long after the rollup read it (days,
against ``settle_s``); the rollup's own rows are kept
:attr:`RollupConfig.keep` and deleted in the same pass.

Shaped like the reconciler: :class:`RollupConfig` validates its defaults and
:meth:`Rollup.run_once` does one pass and returns :class:`RollupCounts`.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ledgerq.ledger.protocol import RollupLedger


@dataclass(frozen=True)
class RollupConfig:
    #: Minutes are counted once they are this old (a finish's commit lag).
    settle_s: float = 60.0
    #: At most this much finish time per statement (bounds one step's work).
    max_span_s: float = 3600.0
    #: How far back the first pass starts.
    backfill_s: float = 7 * 86400.0
    #: A pass stops after this long even if it has not caught up.
    budget_s: float = 10.0
    #: Rollup rows older than this are deleted (the overview's longest window is 7 days).
    keep_s: float = 8 * 86400.0

    def __post_init__(self) -> None:
        if not 1 <= self.settle_s <= 3600:
            raise ValueError(f"settle_s must be 1..3600, got {self.settle_s}")
        if not 60 <= self.max_span_s <= 86400:
            raise ValueError(f"max_span_s must be 60..86400, got {self.max_span_s}")
        if not 0 <= self.backfill_s <= 90 * 86400:
            raise ValueError(f"backfill_s must be 0..90 days, got {self.backfill_s}")
        if self.keep_s < 86400:
            raise ValueError(f"keep_s must be at least a day, got {self.keep_s}")
        if self.budget_s <= 0:
            raise ValueError(f"budget_s must be positive, got {self.budget_s}")


@dataclass
class RollupCounts:
    steps: int = 0
    #: Finished tasks counted, and rollup rows written (inserted or added to).
    tasks: int = 0
    rows: int = 0
    pruned: int = 0
    caught_up: bool = False
    rolled_upto: str | None = None
    elapsed_s: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["elapsed_s"] = round(self.elapsed_s, 4)
        return data

    def line(self) -> str:
        state = "caught up" if self.caught_up else "behind"
        return (
            f"rollup: counted {self.tasks} finished tasks into {self.rows} rows in "
            f"{self.steps} steps ({state}, up to {self.rolled_upto}), pruned {self.pruned} "
            f"in {self.elapsed_s * 1000:.0f} ms"
        )


@dataclass
class Rollup:
    ledger: RollupLedger
    config: RollupConfig = field(default_factory=RollupConfig)

    async def run_once(self) -> RollupCounts:
        """Step until caught up or out of budget (see the module docstring)."""
        started = time.perf_counter()
        counts = RollupCounts()
        cfg = self.config
        while True:
            step = await self.ledger.roll_up(cfg.settle_s, cfg.max_span_s, cfg.backfill_s)
            counts.steps += 1
            counts.tasks += step.tasks
            counts.rows += step.rows
            counts.caught_up = step.caught_up
            counts.rolled_upto = None if step.rolled_upto is None else step.rolled_upto.isoformat()
            if step.caught_up or time.perf_counter() - started > cfg.budget_s:
                break
        counts.pruned = await self.ledger.prune_rollup(cfg.keep_s)
        counts.elapsed_s = time.perf_counter() - started
        return counts
