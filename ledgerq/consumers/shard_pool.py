"""``--shards auto``: the live workers of a pool split the shards among themselves.

A worker started with ``--shards auto`` carries its pool's tag at the end of
its id (:attr:`~ledgerq.consumers.worker.WorkerConfig.pool_tag`: a digest of
its queues, its ``--kinds`` and the shard count, so only workers that could
stand in for each other share a pool). Every ``every_s`` :class:`ShardPool`
reads the pool's live members from their liveness rows (``ledgerq_workers``,
:mod:`.liveness`: not gone, not presumed dead) and computes its own shards by
rendezvous hashing (:mod:`ledgerq.ledger.membership`): every member reaches the
same split from the same rows, and a join or a leave moves only its own share.

When its shards change, the worker switches (:meth:`Worker.reshard`): it
consumes the new route's broker queue (declared first, so the relay never
routes to nothing), rewrites its subscriptions (the old route's row is replaced
at once, so the reconciler returns what was published there to pending:
``unpublish_unserved``), then cancels the old consumers; deliveries already
received from them are still claimed or skipped (fenced) and acked on their
channel. A dead member's shards are so served by the others within its
liveness silence, one refresh and one reconciler pass: far below a lease.

Between two refreshes members may briefly disagree (one has seen a join, the
other not yet): a shard is then served twice or not at all for a moment. Both
are safe: claims are fenced compare-and-sets, and an unserved shard's tasks
wait in the ledger.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from ledgerq.consumers.beat import Beat
from ledgerq.ledger.membership import shards_of
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.protocol import RoutingLedger

log = logging.getLogger("ledgerq.worker")

#: Seconds between two reads of the pool's members.
REFRESH_S = 2.0

Reshard = Callable[[frozenset[int]], Awaitable[None]]


class ShardPool(Beat):
    def __init__(
        self,
        ledger: RoutingLedger,
        worker_id: str,
        tag: str,
        count: int,
        on_change: Reshard,
        *,
        every_s: float = REFRESH_S,
    ) -> None:
        if not worker_id.endswith(tag):
            raise ValueError(f"worker id {worker_id!r} does not carry its pool's tag {tag!r}")
        super().__init__(every_s, Outage("reading the shard pool's members", log))
        self._ledger = ledger
        self._worker_id = worker_id
        self._tag = tag
        self._count = count
        self._on_change = on_change
        #: The shards this worker serves now (None until the first switch).
        self.shards: frozenset[int] | None = None
        #: The members seen at the last read.
        self.members: tuple[str, ...] = ()

    async def compute(self) -> frozenset[int]:
        """This worker's shards among the pool's live members (itself counted in)."""
        self.members = tuple(await self._ledger.pool_members(self._tag))
        return shards_of(self._worker_id, self.members, self._count)

    async def beat(self) -> None:
        shards = await self.compute()
        if shards == self.shards:
            return
        await self._on_change(shards)  # raises: the next beat tries again
        log.info(
            "worker %s serves shards %s of %d (%d live in its pool)",
            self._worker_id,
            ",".join(map(str, sorted(shards))) or "none",
            self._count,
            len(set(self.members) | {self._worker_id}),
        )
        self.shards = shards
