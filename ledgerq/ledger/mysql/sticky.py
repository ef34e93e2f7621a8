"""Sticky retries on the MySQL / MariaDB ledger (``sticky.sql``, migration m0011),
as PostgreSQL's (migration 0018, docs/design.md "Sticky retries").

``@task(sticky_retry=seconds)``: a failed attempt's retry is held for the worker
that ran it, on that worker's personal route
(:func:`~ledgerq.ledger.routing.sticky_route`, ``ledgerq_subscriptions.sticky_route``),
until ``seconds`` after the retry is due; then any worker may take it.

- What a worker registers at its start (:func:`windows_to_write`, statements
  ``kind_windows``, ``set_window``): each kind's window, written only where it
  differs from the stored one; a kind without a window and without a row is not
  written. Two workers starting together may both write a new window: the same
  value either way.
- The hold: the finish's ``retry_tasks`` (queries.sql) writes ``sticky_worker``
  (the attempt's worker) and ``sticky_until`` (the retry's due time plus the
  kind's window) for a retry of a sticky kind, NULL for any other retry and
  for a release.
- The pick (fragments.sql ``held``): a row is held while its ``sticky_until``
  is ahead and its worker has a live personal subscription of its queue (not
  expired, not ``--direct``, not presumed dead). The shared windows and the
  direct claim take only rows held for nobody (``due_lane``); each live
  personal route is a window of its own (relay.sql ``live_windows``) that
  takes only the rows held for its worker (``held_pick``, through the index
  ``ledgerq_tasks_held``). A hold lapses by itself when its window runs out or
  its worker's subscription goes (a stopped worker unsubscribes; a dead one's
  expires or is presumed dead): the next pick reads the row as held for
  nobody. A row published to a personal route whose worker left is taken
  back by the reconciler (fragments.sql ``route_served``) and picked again.

Races: the pick reads the hold without a lock; a hold that lapses between the
read and the relay's lock of the row is published on the personal route all
the same (its worker, still there a moment ago, or the reconciler's take-back
if it left), as on PostgreSQL, whose pick reads the view once per statement.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.sql import load_in_lists


@dataclass(frozen=True)
class StickyQueries:
    """``ledger/mysql/sticky.sql``."""

    kind_windows: TextClause
    set_window: TextClause


SQ: StickyQueries = load_in_lists(StickyQueries, "ledgerq.ledger.mysql", "sticky.sql", LIBRARY)


def windows_to_write(
    windows: Mapping[str, float | None], stored: Sequence[Sequence[Any]]
) -> list[str]:
    """The kinds of ``windows`` whose window differs from the stored one (rows of
    ``kind_windows``: kind, sticky_s); a kind with no window and no row is left
    alone. In kind order (one lock order for workers starting together)."""
    known = {str(r[0]): None if r[1] is None else float(r[1]) for r in stored}
    return sorted(
        kind
        for kind, seconds in windows.items()
        if (kind in known or seconds is not None) and known.get(kind) != seconds
    )
