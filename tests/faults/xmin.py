"""A long transaction that holds the xmin horizon, and what it does to the drain.

``XminHold`` opens a connection of its own (``application_name`` ``xmin-holder``,
so the combined run's backend kills leave it alone), takes a transaction id and
a repeatable-read snapshot, and keeps both until ``release``: no row version that
died after it began can be vacuumed, so every claim and finish leaves a dead
tuple in ``ledgerq_tasks`` that stays until the hold ends.

``DrainProbe`` samples, about once a second, the committed and finished counts
and ``ledgerq_tasks``' dead and live tuples (``pg_stat_user_tables``: the
statistics the server flushes about once a second, so a sample lags by up to that
much), tagged with the phase (``before``, ``hold``, ``after``), and sums them up
per phase: the drain (tasks finished per second), the backlog (committed, not
yet finished) and the dead tuples. ``recovery_s`` is how long after the release
the backlog took to come back to what it was before the hold (its largest
sample in the quiet ``before`` phase, or three seconds of production, whichever
is larger).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

import psycopg

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url


class XminHold:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.conn: psycopg.Connection[tuple[Any, ...]] | None = None
        self.began = 0.0
        self.ended = 0.0

    def start(self) -> int:
        """Begin the hold; its transaction id."""
        url = libpq_url(self.settings.database_url)
        self.conn = psycopg.connect(url, application_name="xmin-holder")
        self.conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        row = self.conn.execute("SELECT txid_current()").fetchone()
        self.conn.execute("SELECT count(*) FROM ledgerq_tasks").fetchone()
        self.began = time.monotonic()
        return int(row[0]) if row else 0

    def release(self) -> None:
        if self.conn is not None:
            try:
                self.conn.rollback()
            finally:
                self.conn.close()
                self.conn = None
                self.ended = time.monotonic()


@dataclass
class Sample:
    t: float
    phase: str
    committed: int
    finished: int
    dead: int
    live: int


@dataclass
class DrainProbe:
    settings: Settings
    rate: float  # tasks committed per second by the producer
    samples: list[Sample] = field(default_factory=list)
    last: float = 0.0

    def dead_tuples(self) -> tuple[int, int]:
        with psycopg.connect(libpq_url(self.settings.database_url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables "
                "WHERE relname = 'ledgerq_tasks'"
            ).fetchone()
        return (int(row[0]), int(row[1])) if row else (0, 0)

    def sample(self, t: float, phase: str, committed: int, finished: int) -> None:
        if self.samples and t - self.last < 1.0:
            return
        self.last = t
        try:
            dead, live = self.dead_tuples()
        except psycopg.OperationalError:  # the server is restarting
            return
        self.samples.append(Sample(t, phase, committed, finished, dead, live))

    def summary(self, hold_end: float) -> dict[str, Any]:
        phases: dict[str, Any] = {}
        for phase in ("before", "hold", "after"):
            rows = [s for s in self.samples if s.phase == phase]
            if phase == "after":
                rows = [s for s in rows if s.t <= hold_end + 60]
            if len(rows) < 2:
                continue
            span = rows[-1].t - rows[0].t
            phases[phase] = {
                "seconds": round(span, 1),
                "drain_per_s": round((rows[-1].finished - rows[0].finished) / span, 1),
                "backlog_max": max(s.committed - s.finished for s in rows),
                "dead_tuples_max": max(s.dead for s in rows),
                "dead_tuples_last": rows[-1].dead,
            }
        before = [s.committed - s.finished for s in self.samples if s.phase == "before"]
        bound = max([*before, int(self.rate * 3)])
        recovered = next(
            (s.t for s in self.samples if s.t >= hold_end and s.committed - s.finished <= bound),
            None,
        )
        return {
            "phases": phases,
            "backlog_bound": bound,
            "recovery_s": None if recovered is None else round(recovered - hold_end, 1),
        }


@dataclass
class Hold:
    """The xmin fault's run: a steady producer (``rate`` tasks a second); the
    combined run's other faults within its first ``chaos_s`` (fractions of the
    tasks produced by then); once they are over, ``quiet_s`` of baseline, then the
    hold for ``hold_s``, then ``after_s`` more production."""

    rate: float = 20.0
    chaos_s: float = 30.0
    quiet_s: float = 10.0
    hold_s: float = 60.0
    after_s: float = 30.0

    @property
    def tasks(self) -> int:
        """The tasks planned (more when the chaos phase runs late: production goes
        on until ``after_s`` past the release)."""
        return int(self.rate * (self.chaos_s + self.quiet_s + self.hold_s + self.after_s))

    @property
    def chaos_tasks(self) -> int:
        return int(self.rate * self.chaos_s)


class HoldPhases:
    """Steps a run through ``chaos``, ``before``, ``hold`` and ``after``, sampling
    as it goes."""

    def __init__(self, settings: Settings, hold: Hold) -> None:
        self.hold = hold
        self.holder = XminHold(settings)
        self.probe = DrainProbe(settings, hold.rate)
        self.phase = "chaos"
        self.quiet_from = 0.0

    async def step(self, elapsed: float, committed: int, finished: int, calm: bool) -> str | None:
        """Move on when the time comes (``calm``: the other faults are over); what
        started, if anything."""
        started = None
        now = time.monotonic()
        if self.phase == "chaos" and calm and elapsed >= self.hold.chaos_s:
            self.phase, self.quiet_from = "before", now
        elif self.phase == "before" and now - self.quiet_from >= self.hold.quiet_s:
            xid = await asyncio.to_thread(self.holder.start)
            self.phase = "hold"
            started = f"xmin_hold xid {xid}"
        elif self.phase == "hold" and now - self.holder.began >= self.hold.hold_s:
            await asyncio.to_thread(self.holder.release)
            self.phase = "after"
        self.probe.sample(now, self.phase, committed, finished)
        return started

    def producing(self) -> bool:
        """Production goes on until ``after_s`` past the release."""
        return self.phase != "after" or time.monotonic() - self.holder.ended < self.hold.after_s

    def summary(self) -> dict[str, Any]:
        return self.probe.summary(self.holder.ended)
