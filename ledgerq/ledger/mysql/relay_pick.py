"""The window arithmetic of the MySQL relay's pick, without I/O: which live broker
routes have room (:func:`open_windows`), and which of their candidates a batch
keeps (:func:`kept`). PostgreSQL does this inside ``ledgerq_pick`` (migration
0014); MySQL has no set-returning functions to hide it in, so
:mod:`ledgerq.ledger.mysql.relay` reads the windows and each window's candidates
(fragments.sql ``due_pick``, the one pick rule) and decides here:

- a window's credit is its live subscribers' capacity minus its rows published
  and not yet claimed; a window with no credit gets nothing, and a queue a live
  ``--direct`` worker claims whole has no window (a ``--direct`` worker of some
  kinds removes those kinds from its queue's windows);
- a worker's personal route (a sticky retry's, ``sticky`` its worker) is a
  window of its own that reads only the rows held for that worker; the shared
  windows read only rows held for nobody, so no row is in both;
- a row two windows cover is taken once, by the window with the most credit
  (then by queue and route), as ``ledgerq_pick``'s ``once``;
- the batch keeps the candidates in the pick rule's order (aged first, oldest
  first; then priority, first attempts before retries, due time, id: the order
  ``due_pick`` sorts each window by, restated here only to merge the windows),
  each window at most its credit, a rate-limited kind at most its bucket's
  whole tokens (:mod:`.metering`), the batch at most its limit.

The direct claim keeps its candidates by the same rule, as one window
(:func:`direct_window`).

Two relays read the same credit at once and may each fill it (the rows they
publish are not counted until they commit): a window can hold up to one batch
more than its room per extra relay, as on PostgreSQL.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from ledgerq.ledger.model import DueTask
from ledgerq.ledger.mysql.base import decoded

#: The priority an aged task is reported at (and its rank above every priority).
AGED_PRIORITY = 9
_AGED_RANK = 10


@dataclass(frozen=True)
class Window:
    """One live broker route: its queue, route ('' for the queue's own), the kinds and
    shards it covers (None: all), the kinds of its queue a ``--direct`` worker claims
    itself, its credit and how many subscribers share it."""

    queue: str
    route: str
    kinds: frozenset[str] | None
    shards: frozenset[int] | None
    excluded: frozenset[str]
    credit: int
    subscribers: int
    #: A personal window's worker (a sticky retry's route: it gets only the rows
    #: held for that worker, fragments.sql ``held_pick``); None for a shared one.
    sticky: str | None = None

    def covers(self, kind: str) -> bool:
        """Whether the window's rows may be of ``kind``."""
        return (self.kinds is None or kind in self.kinds) and kind not in self.excluded


def direct_window(limit: int) -> Window:
    """The direct claim's candidates as one window (every queue it claims, room for
    its ``limit``), so that :func:`kept` keeps them as it keeps a relay's."""
    return Window("", "", None, None, frozenset(), limit, 1)


@dataclass(frozen=True)
class Candidate:
    """A row of ``pick_window`` (fragments.sql ``due_pick``) and the window it was read for."""

    window: Window
    id: int
    kind: str
    priority: int
    epoch: int
    suspect: bool
    trace_context: dict[str, str] | None
    attempts: int
    run_at: datetime
    aged: bool

    @classmethod
    def of(cls, window: Window, row: Sequence[Any]) -> Candidate:
        id_, kind, _queue, priority, epoch, suspect, trace, attempts, run_at, aged = row
        return cls(
            window,
            int(id_),
            str(kind),
            int(priority),
            int(epoch),
            bool(suspect),
            decoded(trace),
            int(attempts),
            run_at,
            bool(aged),
        )

    def order(self) -> tuple[bool, int, bool, datetime, int]:
        """The pick rule's order (fragments.sql ``due_pick``'s ORDER BY)."""
        rank = _AGED_RANK if self.aged else self.priority
        return (not self.aged, -rank, not self.aged and self.attempts > 0, self.run_at, self.id)

    def due_task(self) -> DueTask:
        return DueTask(
            self.id,
            self.kind,
            self.window.queue,
            AGED_PRIORITY if self.aged else self.priority,
            self.epoch,
            self.suspect,
            self.trace_context,
            self.window.route or None,
            self.window.subscribers,
        )


def _names(value: Any) -> frozenset[str] | None:
    listed = decoded(value)
    return None if listed is None else frozenset(str(v) for v in listed)


def open_windows(routes: Iterable[Sequence[Any]], direct: Iterable[Sequence[Any]]) -> list[Window]:
    """The windows with room, from ``live_windows``' rows (queue, route, kinds, shards,
    capacity, subscribers, published, sticky) and ``live_direct``'s (queue, kinds)."""
    whole: set[str] = set()
    claimed: dict[str, set[str]] = {}
    for queue, kinds in direct:
        names = _names(kinds)
        if names is None:
            whole.add(str(queue))
        else:
            claimed.setdefault(str(queue), set()).update(names)
    windows = []
    for queue, route, kinds, shards, capacity, subscribers, published, sticky in routes:
        credit = int(capacity) - int(published)
        if str(queue) in whole or credit <= 0:
            continue
        listed = decoded(shards)
        windows.append(
            Window(
                str(queue),
                str(route),
                _names(kinds),
                None if listed is None else frozenset(int(s) for s in listed),
                frozenset(claimed.get(str(queue), ())),
                credit,
                int(subscribers),
                None if sticky is None else str(sticky),
            )
        )
    return windows


def kept(
    candidates: Iterable[Candidate], limit: int, caps: Mapping[str, int] | None = None
) -> list[Candidate]:
    """The candidates a batch of at most ``limit`` keeps, in the pick rule's order:
    each row once (by the window with the most credit), each window at most its
    credit, each kind of ``caps`` (a rate-limited kind: its bucket's whole tokens)
    at most its cap."""
    best: dict[int, Candidate] = {}
    for c in candidates:
        held = best.get(c.id)
        if held is None or _preference(c.window) < _preference(held.window):
            best[c.id] = c
    caps = caps or {}
    taken: Counter[Window] = Counter()
    metered: Counter[str] = Counter()
    chosen: list[Candidate] = []
    for c in sorted(best.values(), key=Candidate.order):
        if len(chosen) >= limit:
            break
        if taken[c.window] >= c.window.credit:
            continue
        if c.kind in caps:
            if metered[c.kind] >= caps[c.kind]:
                continue
            metered[c.kind] += 1
        taken[c.window] += 1
        chosen.append(c)
    return chosen


def _preference(window: Window) -> tuple[int, str, str]:
    return (-window.credit, window.queue, window.route)
