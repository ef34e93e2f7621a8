"""Shard membership by rendezvous hashing (issue 28 item 7): the assignment is a
pure function of the member set and the shard count."""

from __future__ import annotations

import random

import pytest

from ledgerq.ledger.membership import assign, owner, shards_of

COUNT = 1024


def _owners(assignment: dict[str, frozenset[int]]) -> dict[int, str]:
    return {shard: member for member, shards in assignment.items() for shard in shards}


def _members(n: int) -> list[str]:
    return [f"host-{i}:{1000 + i}:abc{i:03x}+auto.pool" for i in range(n)]


@pytest.mark.parametrize("n", [1, 2, 3, 5, 16])
def test_every_shard_is_assigned_to_exactly_one_member(n: int) -> None:
    assignment = assign(_members(n), COUNT)
    assert set(assignment) == set(_members(n))
    assert sum(len(s) for s in assignment.values()) == COUNT
    assert set().union(*assignment.values()) == set(range(COUNT))


def test_it_is_deterministic_and_ignores_the_members_order_and_repeats() -> None:
    members = _members(7)
    shuffled = random.Random(3).sample(members, len(members))
    assert assign(members, COUNT) == assign(shuffled + members[:2], COUNT)


def test_the_shards_spread_about_evenly() -> None:
    assignment = assign(_members(4), COUNT)
    assert all(COUNT / 4 * 0.75 < len(s) < COUNT / 4 * 1.25 for s in assignment.values())


@pytest.mark.parametrize("n", [1, 2, 4, 9])
def test_a_join_moves_only_about_one_nth_of_the_shards_all_to_the_joiner(n: int) -> None:
    before = _owners(assign(_members(n), COUNT))
    joiner = "late:1:fff+auto.pool"
    after = _owners(assign([*_members(n), joiner], COUNT))
    moved = {shard for shard in range(COUNT) if before[shard] != after[shard]}
    assert all(after[shard] == joiner for shard in moved)
    share = COUNT / (n + 1)
    assert share * 0.75 < len(moved) < share * 1.25


@pytest.mark.parametrize("n", [2, 3, 8])
def test_a_leave_moves_only_the_leavers_shards(n: int) -> None:
    members = _members(n)
    before = assign(members, COUNT)
    leaver = members[1]
    after = assign([m for m in members if m != leaver], COUNT)
    for member, shards in after.items():
        assert shards >= before[member]  # kept all it had
    gained = set().union(*(after[m] - before[m] for m in after))
    assert gained == before[leaver]


def test_a_member_with_no_shard_gets_an_empty_set() -> None:
    assignment = assign(_members(5), 2)
    assert sum(1 for s in assignment.values() if not s) >= 3
    assert set().union(*assignment.values()) == {0, 1}


def test_shards_of_counts_the_member_in_and_matches_owner() -> None:
    members = _members(3)
    me = "me:1:aaa+auto.pool"
    mine = shards_of(me, members, 64)
    assert mine == assign([*members, me], 64)[me]
    assert all(owner(shard, [*members, me]) == me for shard in mine)
    assert shards_of(me, [], 64) == frozenset(range(64))


def test_it_refuses_no_members_and_a_bad_count() -> None:
    with pytest.raises(ValueError, match="no members"):
        assign([], 4)
    with pytest.raises(ValueError, match="shard count"):
        assign(["a"], 0)
