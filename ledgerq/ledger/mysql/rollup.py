"""The dashboard's rollup on the MySQL / MariaDB ledger (``rollup.sql``, migration
m0012): PostgreSQL's :class:`~ledgerq.ledger.pg.overview.PgOverview` ``roll_up``
and ``prune_rollup``, which :class:`~ledgerq.relay.rollup.Rollup` calls from the
reconciler's pass, with the same semantics.

A step counts the tasks that finished in the next span ``[lo, hi)`` into the
minute rows of ``ledgerq_rollup_counts`` and ``ledgerq_rollup_latency``, adds
those minutes to their hour rows, and moves the mark ``rolled_upto`` to ``hi``,
all in one transaction that holds the state row's lock (``lock_rollup``): a
span is counted whole or not at all, and two steps at once run one after the
other, the second finding the span done. The span is PostgreSQL's
``rollup_span``: from the mark (before the first step, ``backfill_s`` ago),
moved on to the minute of the next finished task if nothing finished in
between, to at most ``max_span_s`` later and at most ``settle_s`` before the
database's clock, every bound a whole minute (``max_span_s`` counted in whole
minutes, so each minute is counted by one step and its hour can be summed from
its minutes).

Races. The finish writes ``finished_at = UTC_TIMESTAMP(6)``, the start of its
statement, and commits a little later. A task whose finish committed more than
``settle_s`` after that (the mark rounds down to the minute, so from
``settle_s`` to ``settle_s + 60`` s) may land behind the mark and is never
counted -- the overview would miss it, history would not: PostgreSQL's rule. A
finish that commits while a step runs is counted by this step if its
``finished_at`` is in the span and it committed before the step read history,
else by a later one: never twice, since spans do not overlap and the mark moves
in the step's transaction. The step's reads of history are plain reads (READ
COMMITTED, :mod:`.engines`), so it takes no lock there and no finish waits for
it. Retention drops history days after the rollup read it and never touches
the rollup's rows, which :meth:`MyRollup.prune_rollup` deletes after
``keep_s``; the testing protocol's ``truncate`` (:mod:`.harness`) empties them
and clears the mark.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import TextClause

from ledgerq.ledger.model import RollupStep
from ledgerq.ledger.mysql.base import MyBase, aware, micros, translated
from ledgerq.ledger.sql import load, read_library

#: The rules the rollup shares with the overview's fresh tail (overview.sql).
OVERVIEW_LIBRARY = read_library("ledgerq.ledger.mysql", "overview_fragments.sql")


@dataclass(frozen=True)
class RollupQueries:
    """``ledger/mysql/rollup.sql``."""

    lock_rollup: TextClause
    next_finished: TextClause
    roll_up_counts: TextClause
    roll_up_latency: TextClause
    roll_up_count_hours: TextClause
    roll_up_latency_hours: TextClause
    rollup_summary: TextClause
    move_mark: TextClause
    prune_rollup_counts: TextClause
    prune_rollup_latency: TextClause
    rolled_upto: TextClause
    truncate_rollup_counts: TextClause
    truncate_rollup_latency: TextClause
    reset_rollup: TextClause


UQ: RollupQueries = load(RollupQueries, "ledgerq.ledger.mysql", "rollup.sql", OVERVIEW_LIBRARY)

MINUTE = timedelta(minutes=1)


def minute_of(value: datetime) -> datetime:
    """``value`` rounded down to its minute (PostgreSQL's ``date_trunc('minute', ...)``)."""
    return value.replace(second=0, microsecond=0)


@dataclass(frozen=True)
class Span:
    """The next span ``[lo, hi)`` of the rollup (naive UTC), and whether it reaches
    as far as the rollup may go now."""

    lo: datetime
    hi: datetime
    caught_up: bool


def next_span(
    mark: datetime | None,
    now: datetime,
    first_finish: datetime | None,
    settle_s: float,
    max_span_s: float,
    backfill_s: float,
) -> Span:
    """PostgreSQL's ``rollup_span``, every bound a whole minute: from ``mark`` (None:
    ``backfill_s`` before ``now``), skipped on to the minute of ``first_finish`` (the
    first finish at or after the mark; None: nothing finished since), at most
    ``max_span_s`` (in whole minutes, at least one) long, ending at most ``settle_s``
    before ``now``."""
    start = mark if mark is not None else minute_of(now - timedelta(seconds=backfill_s))
    ripe = minute_of(now - timedelta(seconds=settle_s))
    skip_to = minute_of(first_finish) if first_finish is not None else ripe
    lo = min(ripe, max(start, skip_to))
    longest = MINUTE * max(1, int(max_span_s // 60))
    return Span(lo, max(lo, min(lo + longest, ripe)), lo + longest >= ripe)


class MyRollup(MyBase):
    async def roll_up(self, settle_s: float, max_span_s: float, backfill_s: float) -> RollupStep:
        """One step (the module docstring): ``lock_rollup``, the span, its minute and
        hour rows and the mark, in one transaction."""
        with translated():
            async with self.engine.begin() as conn:
                state = (await conn.execute(UQ.lock_rollup)).one()
                start = state.rolled_upto
                if start is None:
                    start = minute_of(state.now - timedelta(seconds=backfill_s))
                first = (await conn.execute(UQ.next_finished, {"mark": start})).scalar()
                span = next_span(start, state.now, first, settle_s, max_span_s, backfill_s)
                bounds = {"lo": span.lo, "hi": span.hi}
                rows = 0
                if span.hi > span.lo:
                    for statement in (UQ.roll_up_counts, UQ.roll_up_latency):
                        rows += int((await conn.execute(statement, bounds)).rowcount)
                    for statement in (UQ.roll_up_count_hours, UQ.roll_up_latency_hours):
                        await conn.execute(statement, bounds)
                summary = (await conn.execute(UQ.rollup_summary, bounds)).one()
                await conn.execute(UQ.move_mark, {"hi": span.hi})
        rows += int(summary.hour_rows)
        return RollupStep(int(summary.tasks), rows, aware(span.hi), span.caught_up)

    async def prune_rollup(self, keep_s: float) -> int:
        """Delete the rollup's rows older than ``keep_s`` (both grains); how many."""
        params = {"keep_us": micros(keep_s)}
        pruned = 0
        with translated():
            async with self.engine.begin() as conn:
                for statement in (UQ.prune_rollup_counts, UQ.prune_rollup_latency):
                    pruned += int((await conn.execute(statement, params)).rowcount)
        return pruned

    async def rolled_upto(self) -> datetime | None:
        """Where the rollup has counted up to (None: it never ran since the ledger was
        created or emptied)."""
        value = (await self._rows(UQ.rolled_upto, {}))[0].rolled_upto
        return aware(value) if isinstance(value, datetime) else None
