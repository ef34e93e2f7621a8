"""The relay's side of the seam on MySQL / MariaDB (:class:`~ledgerq.ledger.protocol.RelayLedger`):
``publish_batch`` and its ``mark_published``, ``return_unpublished``,
``kind_durations``; and the pick the reconciler's overdue step shares
(:mod:`.reconcile`). Statements in ``relay.sql``.

A batch is one transaction of the ledger's own, in READ COMMITTED (every
connection of the engine, :mod:`.engines`), held open for the caller's block:

1. read the live broker routes and the ``--direct`` workers (``live_windows``,
   ``live_direct``), and each window with credit's candidates by the one pick
   rule (fragments.sql ``due_pick``, shared with the direct claim; a worker's
   personal window, the rows held for it, ``held_pick``: :mod:`.sticky`), plain reads;
   a rate-limited kind's rows only through its bucket, locked first
   (:mod:`.metering`);
2. keep what the windows (and the buckets) have room for (:mod:`.relay_pick`);
3. lock the kept rows by primary key, ``FOR UPDATE SKIP LOCKED``, re-checking
   that each is still pending at the epoch it was read with, due and ready
   (not paused, first of its ordering key: ``lock_picked``). Under READ
   COMMITTED InnoDB locks only the rows it returns; a locking read that
   scanned the due index itself would lock every row it sorted (and, under
   REPEATABLE READ, the gaps: every producer's insert into that range would
   wait for the relay's commit);
4. debit the buckets the locked rows spent, before the commit.

Races: two relays read the same candidates (the reads take no lock); the first
to lock a row keeps it, the other skips it and publishes fewer this time, never
the same row. A row claimed, published or taken back between the read and the
lock has moved on (status or epoch) and is skipped by the lock's re-check. A
direct claim holding a row makes the relay skip it, and the other way round.

``mark_published`` and ``return_unpublished`` are fenced compare-and-sets on
(id, epoch, status): the rows in the expected status are locked first
(``fence_publishing``, ``fence_published``; MariaDB has no ``UPDATE ...
RETURNING``) and their epochs compared with the fences (:func:`held`), then the
rows whose fences held are written by id, the fence repeated in the write
(``(id, epoch) IN :fences`` and the status), in the same transaction: nobody
can move a locked row in between, so the ids kept are the ids that moved.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.model import DueTask
from ledgerq.ledger.mysql import claims, metering, plans
from ledgerq.ledger.mysql.base import MyBase, translated
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.mysql.relay_pick import Candidate, kept, open_windows
from ledgerq.ledger.scheduling import DEFAULT_AGING_S
from ledgerq.ledger.sql import load_in_lists


@dataclass(frozen=True)
class RelayQueries:
    """``ledger/mysql/relay.sql``."""

    live_windows: TextClause
    live_direct: TextClause
    pick_window: TextClause
    pick_held: TextClause
    lock_picked: TextClause
    fence_publishing: TextClause
    mark_published: TextClause
    fence_published: TextClause
    take_back: TextClause
    kind_durations: TextClause


RQ: RelayQueries = load_in_lists(RelayQueries, "ledgerq.ledger.mysql", "relay.sql", LIBRARY)


def pick(limit: int, aging_s: float, min_wait_s: float = 0.0) -> plans.Plan[list[DueTask]]:
    """Lock up to ``limit`` due pending rows the live windows have room for, due
    ``min_wait_s`` or longer (the module docstring's steps), a rate-limited kind's
    within its bucket, which it debits (:mod:`.metering`); in the pick rule's order."""
    if limit < 1:
        return []
    buckets = yield from metering.take()
    routes = yield RQ.live_windows, {}
    direct = yield RQ.live_direct, {}
    candidates: list[Candidate] = []
    for window in open_windows(routes.rows, direct.rows):
        room = min(window.credit, limit)
        lanes: list[tuple[frozenset[str] | None, frozenset[str], float, int]] = [
            (window.kinds, window.excluded | buckets.metered, aging_s, room)
        ]
        lanes += [
            (frozenset([kind]), window.excluded, 0.0, min(room, buckets.caps[kind]))
            for kind in buckets.open()
            if window.covers(kind)
        ]
        for kinds, excluded, aged_after, most in lanes:
            params = claims.pick_params(
                [window.queue], kinds, window.shards, excluded, aged_after, min_wait_s, most
            )
            if window.sticky is None:
                answer = yield RQ.pick_window, params
            else:  # a personal window: only its worker's held rows
                answer = yield RQ.pick_held, {**params, "held_for": window.sticky}
            candidates.extend(Candidate.of(window, row) for row in answer.rows)
    chosen = kept(candidates, limit, buckets.caps)
    if not chosen:
        return []
    locked = yield RQ.lock_picked, {"ids": sorted(c.id for c in chosen)}
    won = held({c.id: c.epoch for c in chosen}, locked.rows)
    yield from metering.debit(buckets, Counter(c.kind for c in chosen if c.id in won))
    return [c.due_task() for c in chosen if c.id in won]


def held(epochs: Mapping[int, int], locked: Sequence[Sequence[Any]]) -> set[int]:
    """Of the rows a statement locked (id, epoch, ...), the ids still at the epoch
    ``epochs`` holds for them: the fence, checked on the locked (latest) version."""
    return {int(r[0]) for r in locked if epochs.get(int(r[0])) == int(r[1])}


def mark_published(rows: Sequence[DueTask]) -> plans.Plan[set[int]]:
    """pending|published -> published for ``rows`` still at their epochs; the ids moved."""
    if not rows:
        return set()
    epochs = {r.id: r.epoch for r in rows}
    fenced = yield RQ.fence_publishing, {"ids": sorted(epochs)}
    moved = held(epochs, fenced.rows)
    routes: dict[str, list[int]] = {}
    for row in rows:
        if row.id in moved:
            routes.setdefault(row.route or "", []).append(row.id)
    for route, ids in sorted(routes.items()):
        fences = [(i, epochs[i]) for i in sorted(ids)]
        yield RQ.mark_published, {"ids": sorted(ids), "fences": fences, "route": route}
    return moved


def take_back(rows: Sequence[tuple[int, int]]) -> plans.Plan[list[tuple[int, str]]]:
    """published -> pending, epoch + 1, for the (id, epoch) ``rows`` still published at
    that epoch; each moved row's id and queue."""
    epochs = dict(sorted(rows))
    if not epochs:
        return []
    fenced = yield RQ.fence_published, {"ids": list(epochs)}
    kept = held(epochs, fenced.rows)
    moved = [(int(r[0]), str(r[2])) for r in fenced.rows if int(r[0]) in kept]
    if moved:
        ids = [i for i, _ in moved]
        yield RQ.take_back, {"ids": ids, "fences": [(i, epochs[i]) for i in ids]}
    return moved


class MyPublishBatch:
    """Due rows locked by the open transaction while they are published."""

    def __init__(self, conn: AsyncConnection, rows: list[DueTask]) -> None:
        self._conn = conn
        self.rows = rows

    async def mark_published(self, rows: Sequence[DueTask]) -> set[int]:
        with translated():
            return await plans.adrive(
                mark_published(rows), plans.async_runner(self._conn, "ledgerq")
            )


class MyRelay(MyBase):
    @asynccontextmanager
    async def _locked(self, plan: plans.Plan[list[DueTask]]) -> AsyncIterator[MyPublishBatch]:
        """Run ``plan`` in a transaction held open for the block (commit on a normal
        exit, else roll back), its rows locked meanwhile."""
        with translated():
            async with self.engine.begin() as conn:
                rows = await plans.adrive(plan, plans.async_runner(conn, "ledgerq"))
                yield MyPublishBatch(conn, rows)

    def publish_batch(
        self, limit: int, aging_s: float = DEFAULT_AGING_S
    ) -> AbstractAsyncContextManager[MyPublishBatch]:
        return self._locked(pick(limit, aging_s))

    async def publish_due(self, limit: int, aging_s: float = DEFAULT_AGING_S) -> list[DueTask]:
        """The pick and the mark in one transaction (two statements here: MySQL's
        UPDATE cannot return the rows it moved)."""
        async with self.publish_batch(limit, aging_s) as batch:
            marked = await batch.mark_published(batch.rows)
        return [row for row in batch.rows if row.id in marked]

    async def return_unpublished(self, rows: Sequence[DueTask]) -> set[int]:
        if not rows:
            return set()
        with translated():
            async with self.engine.begin() as conn:
                plan = take_back([(r.id, r.epoch) for r in rows])
                moved = await plans.adrive(plan, plans.async_runner(conn, "ledgerq"))
        return {task_id for task_id, _ in moved}

    async def kind_durations(self) -> dict[str, float]:
        rows = await self._rows(RQ.kind_durations, {})
        return {str(r.kind): float(r.seconds) for r in rows if r.seconds is not None}
