"""The shard hash is part of the wire contract: these values must never change."""

from __future__ import annotations

import hashlib

import pytest

from ledgerq.ledger.sharding import MAX_SHARDS, key_hash, shard_of


def test_key_hash_is_the_documented_blake2b_prefix() -> None:
    digest = hashlib.blake2b(b"account-42", digest_size=8).digest()
    assert key_hash("account-42") == int.from_bytes(digest, "big") & (2**63 - 1)
    assert key_hash("account-42") == key_hash("account-42")
    assert key_hash("account-42") != key_hash("account-43")
    assert 0 <= key_hash("\N{SNOWMAN}") < 2**63


def test_shard_of_uses_the_key_else_the_id() -> None:
    assert shard_of("account-42", 7, 4) == key_hash("account-42") % 4
    assert shard_of(None, 7, 4) == 3
    assert shard_of(None, 7, 1) == 0
    keys = [f"k{i}" for i in range(4000)]
    counts = [sum(shard_of(k, 0, 4) == s for k in keys) for s in range(4)]
    assert all(800 < c < 1200 for c in counts), counts


@pytest.mark.parametrize("count", [0, -1, MAX_SHARDS + 1])
def test_shard_count_is_bounded(count: int) -> None:
    with pytest.raises(ValueError, match="shard count"):
        shard_of("k", 1, count)
