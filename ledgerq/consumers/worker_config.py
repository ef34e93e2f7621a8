"""What a worker is told: :class:`WorkerConfig`, validated when built.

The options of ``ledgerq worker`` (queues, kinds, shards, concurrency, prefetch,
leases, grace, timeouts, batching: :class:`BatchConfig`) and what follows from them: the kinds it
serves and the subscriptions it registers (one per queue: its kinds, its
shards, its prefetch as its share of the route's window), and with
``--shards auto`` the tag that names its pool. It is a value: nothing here
connects or runs (the worker is :mod:`ledgerq.consumers.worker`).
"""

from __future__ import annotations

import hashlib
import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass, field

from ledgerq.consumers.shard_pool import REFRESH_S
from ledgerq.ledger.routing import Subscription, sticky_route
from ledgerq.ledger.sharding import MAX_SHARDS
from ledgerq.ledger.validation import check_name


@dataclass(frozen=True)
class BatchConfig:
    #: A window takes no new handler after this long (the bound on a commit's wait).
    window_s: float = 0.05
    #: At most this many tasks per window: PostgreSQL keeps 64 subtransactions
    #: (savepoints that wrote) per backend in shared memory before it overflows,
    #: and a window takes one more than its tasks.
    max_tasks: int = 50
    #: Windows open at once, for async and for sync handlers each (connections held).
    lanes: int = 2
    #: A handler slower than this sends its kind to the ordinary path for ``cooldown_s``.
    slow_s: float = 0.5
    cooldown_s: float = 60.0
    #: How long past a sync handler's own timeout its window waits before abandoning it.
    margin_s: float = 5.0
    #: False: every handler takes the ordinary path (its own transaction).
    enabled: bool = True

    def __post_init__(self) -> None:
        if not 0 < self.window_s <= 1.0:
            raise ValueError(f"batch window must be in (0, 1] s, got {self.window_s}")
        if not 1 <= self.max_tasks <= 63:
            raise ValueError(f"batch max_tasks must be 1..63, got {self.max_tasks}")
        if not 1 <= self.lanes <= 100:
            raise ValueError(f"batch lanes must be 1..100, got {self.lanes}")
        if self.slow_s <= 0 or self.cooldown_s < 0 or self.margin_s < 0:
            raise ValueError("batch slow_s must be positive, cooldown_s and margin_s >= 0")


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    #: The kinds of those queues this worker serves (``--kinds``), of those its
    #: registry has handlers for; None: all of those. Routed by RabbitMQ, not
    #: filtered here: see :mod:`ledgerq.ledger.routing`.
    kinds: frozenset[str] | None = None
    #: The shards it serves (``--shards``); None: all.
    shards: frozenset[int] | None = None
    #: ``--shards auto``: the shard count (LEDGERQ_SHARDS) the live workers of its
    #: pool split among themselves (consumers.shard_pool); None: static ``shards``.
    auto_shards: int | None = None
    #: With ``auto_shards``: seconds between two reads of the pool's members.
    pool_refresh_s: float = REFRESH_S
    #: Handlers running at once (async tasks on the loop, or threads for sync ones).
    concurrency: int = 100
    #: Unacked deliveries the broker may push; 0 means twice the concurrency.
    prefetch: int = 0
    #: Connections handlers' ``ctx.session`` may hold at once (per kind: sync/async).
    db_pool: int = 10
    lease_s: float = 60.0
    heartbeat_s: float = 15.0
    #: Liveness beats stopped this long (while other workers' went on): the worker
    #: is presumed dead and its running tasks rescued (consumers.liveness).
    liveness_s: float = 5.0
    #: On SIGTERM, how long in-flight handlers get to finish.
    grace_s: float = 30.0
    #: A handler with no timeout of its own (task or @task option) gets this one,
    #: so a task that always hangs still ends ``dead`` after its attempts.
    default_timeout_s: float | None = 1800.0
    #: A sync handler's thread still running this long past its timeout ends the
    #: worker process (exit 70, crash-only), so that its retry never overlaps it
    #: (consumers.hung). Until then the attempt keeps its lease and its retry waits.
    hang_limit_s: float = 60.0
    max_batch: int = 500
    #: Batched commit for handlers that write through ``ctx.session`` (consumers.batch).
    batch: BatchConfig = field(default_factory=BatchConfig)
    #: Unique per process start (a restarted container often has the same host
    #: name and pid 1): the reconciler counts a dead worker's tasks by this id.
    worker_id: str = field(
        default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"
    )

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError(f"concurrency must be 1..10000, got {self.concurrency}")
        if not 1 <= self.db_pool <= 1000:
            raise ValueError(f"db_pool must be 1..1000, got {self.db_pool}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if not 0 < self.heartbeat_s < self.lease_s or self.liveness_s <= 0:
            raise ValueError(
                "heartbeat_s must be positive and shorter than lease_s, and liveness_s positive"
            )
        if self.grace_s < 0 or self.hang_limit_s <= 0:
            raise ValueError("grace_s must be >= 0 and hang_limit_s positive")
        if self.default_timeout_s is not None and self.default_timeout_s <= 0:
            raise ValueError("default_timeout_s must be positive (or None for no limit)")
        for name in self.queues:
            check_name(name, "queue")
        if frozenset() in (self.kinds, self.shards):
            raise ValueError("kinds and shards, when given, must name at least one each")
        self._join_pool()

    def _join_pool(self) -> None:
        """``--shards auto``: check, and end the worker id with the pool's tag."""
        if self.auto_shards is None:
            return
        if self.shards is not None or not 1 <= self.auto_shards <= MAX_SHARDS:
            raise ValueError(f"auto shards: a shard count of 1..{MAX_SHARDS} and no static shards")
        if self.pool_refresh_s <= 0:
            raise ValueError("pool_refresh_s must be positive")
        if not self.worker_id.endswith(self.pool_tag):  # the pool is read from the ids
            object.__setattr__(self, "worker_id", self.worker_id + self.pool_tag)

    @property
    def pool_tag(self) -> str:
        """With ``auto_shards``, the end of the id of every worker of its pool: a
        digest of the queues, ``kinds`` and shard count ("" without)."""
        if self.auto_shards is None:
            return ""
        kinds = "*" if self.kinds is None else ",".join(sorted(self.kinds))
        text = f"{','.join(sorted(self.queues))};{kinds};{self.auto_shards}"
        return "+auto." + hashlib.blake2b(text.encode(), digest_size=4).hexdigest()

    def serves(self, registered: Iterable[str]) -> frozenset[str]:
        """The kinds served: those registered (handlers), narrowed by ``kinds``."""
        kinds = frozenset(registered)
        return kinds if self.kinds is None else kinds & self.kinds

    def subscriptions(
        self,
        registered: Iterable[str],
        shards: frozenset[int] | None = None,
        *,
        sticky: bool = False,
    ) -> tuple[Subscription, ...]:
        """What this worker serves, one per queue: exactly the kinds it has handlers
        for (narrowed by ``kinds``), its shards (``shards`` if given: those of
        ``--shards auto`` now), and its prefetch as its share of the route's
        window (a task of a kind no live worker registers waits in the ledger,
        unattempted). ``sticky``: it runs a kind with ``sticky_retry``, so each
        subscription also names the worker's personal route."""
        kinds = self.serves(registered)
        served = self.shards if shards is None else shards
        own = sticky_route(self.worker_id) if sticky else None
        return tuple(
            Subscription(q, kinds, served, self.effective_prefetch, own) for q in self.queues
        )

    @property
    def effective_prefetch(self) -> int:
        return self.prefetch or 2 * self.concurrency
