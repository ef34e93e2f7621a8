"""Shard numbers: which slice of the work a task belongs to.

A task's shard is a number from 0 to ``count - 1``. With a shard key (an
account, a tenant) it is a stable hash of the key, so every task of one key
lands in one shard whatever process enqueues it, in whatever language: the
hash is the first 8 bytes of BLAKE2b (digest size 8) of the key's UTF-8
bytes, read big-endian, with the top bit cleared (so it fits PostgreSQL's
``bigint``), modulo the count. Without a key it is the task id modulo the
count, which spreads ids evenly.

The count is a deployment setting: changing it moves keys between shards (no
consistent hashing is promised), so a deployment changes it only while the
ledger is drained of live tasks that must keep their key's order.
"""

from __future__ import annotations

import hashlib
import os

from ledgerq.core.limits import MAX_SHARDS as MAX_SHARDS


def key_hash(key: str) -> int:
    """A non-negative 63-bit hash of ``key``, the same on every machine and run."""
    digest = hashlib.blake2b(key.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") & 0x7FFF_FFFF_FFFF_FFFF


def shard_of(key: str | None, task_id: int, count: int) -> int:
    """The shard of a task with shard key ``key`` (or none) and id ``task_id``."""
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the shard count must be from 1 to {MAX_SHARDS}, got {count!r}")
    return (key_hash(key) if key is not None else task_id) % count


def deployment_count() -> int:
    """``LEDGERQ_SHARDS`` (default 1), read at each call so a producer needs no
    Settings: what ``enqueue(..., shard_key=...)`` hashes modulo."""
    raw = os.environ.get("LEDGERQ_SHARDS", "1")
    try:
        count = int(raw)
    except ValueError:
        count = 0
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"LEDGERQ_SHARDS must be a number from 1 to {MAX_SHARDS}, got {raw!r}")
    return count
