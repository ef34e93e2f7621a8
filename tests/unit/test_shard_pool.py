"""``--shards auto``: the worker's pool tag, and the beat that switches its shards
when the pool's live members change (issue 28 item 7)."""

from __future__ import annotations

from typing import cast

import pytest

from ledgerq.consumers.shard_pool import ShardPool
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.ledger.membership import assign
from ledgerq.ledger.protocol import RoutingLedger


class Members:
    """A stand-in for the ledger's pool_members: the ids it is told are live."""

    def __init__(self, *members: str) -> None:
        self.members = list(members)
        self.tags: list[str] = []

    async def pool_members(self, tag: str) -> list[str]:
        self.tags.append(tag)
        return sorted(m for m in self.members if m.endswith(tag))


def test_an_auto_worker_id_ends_with_its_pools_tag_and_the_tag_names_its_pool() -> None:
    config = WorkerConfig(queues=("a",), auto_shards=8, worker_id="h:1:abc")
    assert config.pool_tag.startswith("+auto.") and config.worker_id == "h:1:abc" + config.pool_tag
    same = WorkerConfig(queues=("a",), auto_shards=8, worker_id="h:2:def")
    assert same.pool_tag == config.pool_tag
    for other in (
        WorkerConfig(queues=("b",), auto_shards=8),
        WorkerConfig(queues=("a",), auto_shards=4),
        WorkerConfig(queues=("a",), kinds=frozenset({"k"}), auto_shards=8),
    ):
        assert other.pool_tag != config.pool_tag
    assert WorkerConfig(queues=("a",), worker_id="h:1:abc").worker_id == "h:1:abc"


@pytest.mark.parametrize(
    "options",
    [
        {"auto_shards": 0},
        {"auto_shards": 4, "shards": frozenset({1})},
        {"auto_shards": 4, "pool_refresh_s": 0},
    ],
)
def test_auto_shards_refuses_a_bad_count_static_shards_and_no_refresh(options: dict) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError):
        WorkerConfig(**options)


def test_subscriptions_take_the_pools_shards_when_given() -> None:
    config = WorkerConfig(queues=("a", "b"), auto_shards=8)
    [a, b] = config.subscriptions({"k"}, frozenset({1, 5}))
    assert a.shards == b.shards == frozenset({1, 5}) and a.route == b.route is not None


async def test_the_pool_switches_only_when_its_members_change_its_shards() -> None:
    tag = "+auto.pool"
    me, other = "me:1:a" + tag, "other:2:b" + tag
    ledger = Members(me, "stranger:3:c+auto.else")
    switches: list[frozenset[int]] = []

    async def reshard(shards: frozenset[int]) -> None:
        switches.append(shards)

    pool = ShardPool(cast(RoutingLedger, ledger), me, tag, 16, reshard, every_s=60)
    await pool.beat()
    assert switches == [frozenset(range(16))]  # alone in its pool: every shard
    await pool.beat()
    assert len(switches) == 1  # nothing changed, nothing switched
    ledger.members.append(other)
    await pool.beat()
    assert switches[-1] == assign([me, other], 16)[me] == pool.shards
    ledger.members.remove(other)
    await pool.beat()
    assert switches[-1] == frozenset(range(16))
    assert set(ledger.tags) == {tag}


async def test_a_failed_switch_is_tried_again_on_the_next_beat() -> None:
    tag = "+auto.pool"
    calls: list[frozenset[int]] = []

    async def reshard(shards: frozenset[int]) -> None:
        calls.append(shards)
        if len(calls) == 1:
            raise ConnectionError("broker away")

    pool = ShardPool(
        cast(RoutingLedger, Members("me" + tag)), "me" + tag, tag, 4, reshard, every_s=60
    )
    with pytest.raises(ConnectionError):
        await pool.beat()
    assert pool.shards is None
    await pool.beat()
    assert calls == [frozenset(range(4))] * 2 and pool.shards == frozenset(range(4))


def test_a_worker_id_without_its_pools_tag_is_refused() -> None:
    with pytest.raises(ValueError, match="tag"):
        ShardPool(Members(), "me", "+auto.pool", 4, lambda s: None, every_s=1)  # type: ignore[arg-type,return-value]
