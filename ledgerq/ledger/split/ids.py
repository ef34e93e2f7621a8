"""Ledger shards (database shards): which PostgreSQL database holds a task.

``LEDGERQ_DATABASE_URL`` may list several databases, comma-separated; the one
at position ``k`` is **ledger shard** ``k`` of ``n``. (Not the *routing* shard
of :mod:`ledgerq.ledger.sharding`, a number stored on each task that splits the
work among consumers; the two share only :func:`~ledgerq.ledger.sharding.key_hash`.)

Task ids carry their shard: ``ledgerq migrate`` gives shard ``k``'s id sequence
the range ``[(k << 48) + 1, ((k + 1) << 48) - 1]``, so ``nextval`` itself
yields tagged ids at no runtime cost, ids stay unique across shards, and shard
0's range is the one a one-database ledger has always had (its ids do not
change). 2**48 ids per shard; at most :data:`MAX_LEDGER_SHARDS` shards, so every
id stays below 2**53 and survives a JSON number (JavaScript's doubles).

A task's shard is chosen when it is enqueued: with a ledger shard key (an
account, a tenant: whatever the caller's business data is sharded by) it is
``key_hash(key) % n``; without one, round robin. The caller opens its business
transaction on that shard's database (:class:`ledgerq.Shards`), and
``enqueue`` checks the id it got back: an id of another shard than the key's
means the transaction was opened on the wrong database
(:class:`~ledgerq.core.errors.WrongShardError`).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterable
from typing import TypeVar

from ledgerq.core.errors import WrongShardError
from ledgerq.core.limits import MAX_LEDGER_SHARDS as MAX_LEDGER_SHARDS
from ledgerq.ledger.sharding import key_hash

T = TypeVar("T")

#: Bits of a task id below its ledger shard's index.
SHARD_SHIFT = 48


def id_range(shard: int) -> tuple[int, int]:
    """The first and last id of ledger shard ``shard``'s sequence."""
    if not 0 <= shard < MAX_LEDGER_SHARDS:
        raise ValueError(f"a ledger shard index is from 0 to {MAX_LEDGER_SHARDS - 1}, got {shard}")
    return (shard << SHARD_SHIFT) + 1, ((shard + 1) << SHARD_SHIFT) - 1


def shard_of_id(task_id: int) -> int:
    """The ledger shard holding ``task_id`` (the benchmark's synthetic negative
    history ids belong to shard 0)."""
    return max(task_id, 0) >> SHARD_SHIFT


def shard_for_key(key: str, count: int) -> int:
    """The ledger shard of ledger shard key ``key`` among ``count`` shards."""
    check_count(count)
    return key_hash(key) % count


def check_count(count: int) -> None:
    if not 1 <= count <= MAX_LEDGER_SHARDS:
        raise ValueError(f"the ledger shard count is from 1 to {MAX_LEDGER_SHARDS}, got {count}")


def check_placement(task_id: int, key: str, count: int) -> None:
    """Raise :class:`WrongShardError` unless ``task_id`` is on ``key``'s shard."""
    want, got = shard_for_key(key, count), shard_of_id(task_id)
    if want != got:
        raise WrongShardError(
            f"task {task_id} was enqueued on ledger shard {got}, but its ledger shard key "
            f"{key!r} belongs on shard {want} of {count}: open the transaction on "
            f"Shards.engine_for(key) (roll this transaction back)"
        )


class RoundRobin:
    """Shard indexes 0, 1, ..., n - 1, 0, ... (thread-safe), for tasks without a key."""

    def __init__(self, count: int) -> None:
        check_count(count)
        self._next = itertools.cycle(range(count))
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return next(self._next)


def split_by_shard(items: Iterable[T], id_of: Callable[[T], int]) -> dict[int, list[T]]:
    """``items`` grouped by the ledger shard of their task id, each group in input order."""
    groups: dict[int, list[T]] = {}
    for item in items:
        groups.setdefault(shard_of_id(id_of(item)), []).append(item)
    return groups
