"""Shard membership by rendezvous hashing: which live worker serves which shard.

``ledgerq worker --shards auto`` workers split the shards (0 to ``count - 1``,
LEDGERQ_SHARDS) among the live members of their pool, read from their
liveness beats (:mod:`ledgerq.consumers.shard_pool`). Each shard goes to the
member with the highest weight ``hash(shard, member)`` (highest random
weight, Thaler and Ravishankar): every member computes the same assignment
from the same member set, with no coordination, and a join or a leave moves
only its own share: a joiner takes, from each shard's previous holder, just
the shards it now outweighs (about ``1/n`` of them); a leaver's shards go, one
by one, to whoever weighs second on each, and nobody else's move.

The weight is the first 8 bytes of BLAKE2b (digest size 8) of
``"<shard>/<member>"``, read big-endian; ties (never seen in practice) go to
the greater member id, so the result depends on the set only, not its order.
Pure and I/O free: the unit tests are its specification.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from ledgerq.ledger.sharding import MAX_SHARDS


def weight(shard: int, member: str) -> int:
    """``member``'s weight for ``shard``: the same on every machine and run."""
    digest = hashlib.blake2b(f"{shard}/{member}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(shard: int, members: Iterable[str]) -> str:
    """The member that serves ``shard`` (``members`` must not be empty)."""
    pool = set(members)
    if not pool:
        raise ValueError("no members to give a shard to")
    return max(pool, key=lambda member: (weight(shard, member), member))


def assign(members: Iterable[str], count: int) -> dict[str, frozenset[int]]:
    """Every member's shards among ``count`` shards: each shard given to exactly
    one member; a member that outweighs on no shard gets an empty set (it serves
    nothing until the pool changes)."""
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the shard count must be from 1 to {MAX_SHARDS}, got {count}")
    pool = sorted(set(members))
    if not pool:
        raise ValueError("no members to give the shards to")
    held: dict[str, set[int]] = {member: set() for member in pool}
    for shard in range(count):
        held[owner(shard, pool)].add(shard)
    return {member: frozenset(shards) for member, shards in held.items()}


def shards_of(member: str, members: Iterable[str], count: int) -> frozenset[int]:
    """``member``'s shards, counting it among ``members`` whether listed or not."""
    return assign({*members, member}, count)[member]
