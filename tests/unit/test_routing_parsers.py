"""The worker's --kinds, --shards and --queues parsers, and routes (issue 14)."""

from __future__ import annotations

import pytest

from ledgerq.broker.topology import Topology
from ledgerq.ledger.routing import (
    RoutingError,
    Subscription,
    parse_kinds,
    parse_queues,
    parse_shards,
    routing_key,
)


def test_shard_ranges_and_lists_parse_to_the_shard_numbers() -> None:
    assert parse_shards("0-3", 4) == frozenset({0, 1, 2, 3})
    assert parse_shards("0,2,5-7", 8) == frozenset({0, 2, 5, 6, 7})
    assert parse_shards(" 3 ", 4) == frozenset({3})
    assert parse_shards(None, 4) is None
    assert parse_shards("", 4) is None


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0-4", "shard 4 does not exist; LEDGERQ_SHARDS=4 gives shards 0-3"),
        ("3-1", "'3-1' is not an ascending range"),
        ("a", "'a' is not a shard number or a range like 0-3"),
        ("0,,1", "'' is not a shard number"),
        ("-1", "'-1' is not a shard number"),
    ],
)
def test_a_bad_shard_list_is_one_line_naming_the_part(value: str, says: str) -> None:
    with pytest.raises(RoutingError) as info:
        parse_shards(value, 4)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_queues_with_and_without_concurrency() -> None:
    assert parse_queues("fast=50,slow=2") == (("fast", 50), ("slow", 2))
    assert parse_queues("a, b") == (("a", None), ("b", None))
    assert parse_queues("default") == (("default", None),)


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("fast=50,slow", "give every queue a concurrency (fast=50,slow=2) or none"),
        ("fast=x", "'x' is not a concurrency (queue=N, N >= 1)"),
        ("fast=0", "concurrency 0 is not 1..10000"),
        ("a,a", "queue 'a' is named twice"),
        ("a,,b", "an empty queue name between commas"),
        ("9x=1", "is malformed"),
    ],
)
def test_a_bad_queue_list_is_one_line(value: str, says: str) -> None:
    with pytest.raises(RoutingError) as info:
        parse_queues(value)
    assert says in str(info.value)
    assert "\n" not in str(info.value)


def test_kinds_parse_and_refuse_malformed_names() -> None:
    assert parse_kinds("a, b.c") == frozenset({"a", "b.c"})
    assert parse_kinds(None) is None
    with pytest.raises(RoutingError, match="an empty kind"):
        parse_kinds("a,,b")
    with pytest.raises(RoutingError, match="malformed"):
        parse_kinds("a b")


def test_a_route_is_stable_and_names_its_own_broker_queue() -> None:
    whole = Subscription("default")
    assert whole.route is None and whole.broker_name == "default"
    one = Subscription("default", frozenset({"b", "a"}), frozenset({1, 0}))
    same = Subscription("default", frozenset({"a", "b"}), frozenset({0, 1}))
    other = Subscription("default", frozenset({"a", "b"}), None)
    assert one.route == same.route != other.route
    assert one.route is not None and one.route.startswith("r-") and len(one.route) == 18
    assert one.broker_name == routing_key("default", one.route) == "default@" + one.route
    spec = Topology("lq").task_queue(one.broker_name)
    assert (spec.name, spec.routing_key) == ("lq.q.default@" + one.route, one.broker_name)
    assert "x-expires" in spec.arguments
    assert "x-expires" not in Topology("lq").task_queue("default").arguments
