"""The worker's claims on the MySQL ledger, as plans (:mod:`.plans`): the broker
path's (:func:`claim_fenced`, a delivery's fences) and the ``--direct`` path's
(:func:`claim_due`, by the relay's pick rule, :func:`pick_params`).

Contract: a claim is a compare-and-set on (id, epoch, status): the rows are
locked by primary key first (MariaDB has no ``UPDATE ... RETURNING``), then
claimed by id (running, epoch + 1, attempts + 1, lease, worker) and read back
(``claimed``); a picked row whose expiry has passed ends cancelled and expired
instead (:func:`.expiry.end_expired`). A stale fence claims nothing.

Races: ``claim_fenced`` waits for a holder of its rows (a relay's publish
commits within milliseconds) and re-checks epoch and status on the latest
version. ``claim_due`` reads its candidates without a lock, then locks them
``FOR UPDATE SKIP LOCKED``: two workers never claim one task, and a row another
transaction holds is skipped, never waited for (the module docstring of
:mod:`.services` has the statement-by-statement reasons).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ledgerq.ledger.model import ClaimedTask, Fence
from ledgerq.ledger.mysql import expiry, metering
from ledgerq.ledger.mysql.base import micros
from ledgerq.ledger.mysql.plans import Plan, keyed
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.mysql.relay_pick import Candidate, direct_window, kept
from ledgerq.ledger.mysql.rows import claimed_tasks


def _claim(
    ids: list[int], worker: str, lease_s: float, max_payload_bytes: int
) -> Plan[list[ClaimedTask]]:
    """Claim the rows ``ids`` the plan locked, and read what the claim answers; those
    past their expiry end instead (:func:`.expiry.end_expired`), as on PostgreSQL."""
    ended = set((yield from expiry.end_expired(ids)))
    ids = [i for i in ids if i not in ended]
    if not ids:
        return []
    params = {"ids": ids, "worker": worker, "lease_us": micros(lease_s)}
    yield MQ.claim_locked, params
    answer = yield MQ.claimed, {"ids": ids, "max_payload_bytes": max_payload_bytes}
    return claimed_tasks(answer.rows)


def claim_fenced(
    fences: Sequence[Fence], worker: str, lease_s: float, max_payload_bytes: int
) -> Plan[list[ClaimedTask]]:
    """The broker path's claim: the rows still at their message's epoch, pending or
    published and due, locked (waiting for a holder), then claimed."""
    epochs = dict(sorted(fences))
    if not epochs:
        return []
    batch = keyed({i: {"epoch": e} for i, e in epochs.items()})
    locked = yield MQ.lock_fenced, {"ids": list(epochs), "batch": batch}
    return (yield from _claim([int(r[0]) for r in locked.rows], worker, lease_s, max_payload_bytes))


def pick_params(
    queues: Sequence[str],
    kinds: Iterable[str] | None,
    shards: Iterable[int] | None,
    excluded: Iterable[str],
    aging_s: float,
    min_wait_s: float,
    limit: int,
) -> dict[str, Any]:
    """The parameters of the pick rule (fragments.sql ``due_pick``): the due pending
    tasks of ``queues``, of ``kinds`` and ``shards`` (None: all), not of ``excluded``,
    due ``min_wait_s`` or longer, aged after ``aging_s`` (0: no aging); ``limit``."""
    return {
        "queues": list(queues),
        "every_kind": kinds is None,
        "kinds": sorted(kinds or ()),
        "every_shard": shards is None,
        "shards": sorted(shards or ()),
        "none_excluded": not excluded,
        "excluded": sorted(excluded),
        "aging_us": micros(aging_s),
        "min_wait_us": micros(min_wait_s),
        "limit": limit,
    }


def claim_due(
    queues: Sequence[str],
    kinds: Sequence[str] | None,
    limit: int,
    aging_s: float,
    worker: str,
    lease_s: float,
    max_payload_bytes: int,
) -> Plan[list[ClaimedTask]]:
    """The direct claim: read the candidates by the relay's rule (:func:`pick_params`;
    a rate-limited kind's only through its bucket, :mod:`.metering`), keep them as
    the relay keeps a window's (:func:`.relay_pick.kept`), lock those still pending
    (SKIP LOCKED), debit the buckets, claim what was locked."""
    if not queues or limit < 1:
        return []
    buckets = yield from metering.take()
    params = pick_params(queues, kinds, None, buckets.metered, aging_s, 0.0, limit)
    ordinary = yield MQ.due_candidates, params
    metered: list[Sequence[Any]] = []
    for kind in buckets.open():
        if kinds is None or kind in kinds:
            params = pick_params(queues, [kind], None, (), 0.0, 0.0, min(limit, buckets.caps[kind]))
            metered.extend((yield MQ.due_candidates, params).rows)
    if not metered:  # the rule's own order, as read: nothing to merge
        chosen = [(int(r[0]), str(r[1])) for r in ordinary.rows]
    else:
        window = direct_window(limit)
        candidates = [Candidate.of(window, row) for row in [*ordinary.rows, *metered]]
        chosen = [(c.id, c.kind) for c in kept(candidates, limit, buckets.caps)]
    if not chosen:
        return []
    locked = yield MQ.lock_due, {"ids": [i for i, _ in chosen]}
    ids = [int(r[0]) for r in locked.rows]
    won = set(ids)
    yield from metering.debit(buckets, Counter(kind for i, kind in chosen if i in won))
    return (yield from _claim(ids, worker, lease_s, max_payload_bytes))
