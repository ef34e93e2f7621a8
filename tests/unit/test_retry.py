from __future__ import annotations

import random

import pytest

from ledgerq.core.errors import InvalidRetryPolicyError
from ledgerq.ledger.retry import DEFAULT_POLICY, RetryPolicy


def test_fixed_waits_the_same_every_time() -> None:
    policy = RetryPolicy.fixed(60)
    assert [policy.delay_for(n) for n in (1, 2, 10)] == [60, 60, 60]


def test_schedule_follows_the_list_then_repeats_its_last_entry() -> None:
    policy = RetryPolicy.schedule(60, 300, 1200)
    assert [policy.delay_for(n) for n in (1, 2, 3, 4, 9)] == [60, 300, 1200, 1200, 1200]


def test_exponential_doubles_within_its_jitter_and_is_capped() -> None:
    policy = RetryPolicy.exponential(base=2, maximum=100)
    for attempt, floor in ((1, 2), (2, 4), (3, 8), (4, 16)):
        delay = policy.delay_for(attempt)
        assert floor <= delay <= floor + 2, (attempt, delay)
    assert policy.delay_for(30) == 100


def test_a_multiplier_sets_how_fast_the_backoff_grows() -> None:
    policy = RetryPolicy.exponential(base=1, maximum=10_000, multiplier=3)
    for attempt, floor in ((1, 1), (2, 3), (3, 9), (4, 27), (5, 81)):
        delay = policy.delay_for(attempt)
        assert floor <= delay <= floor + 1, (attempt, delay)
    flat = RetryPolicy.exponential(base=5, maximum=100, multiplier=1)
    assert all(5 <= flat.delay_for(n) <= 10 for n in (1, 2, 7))


def test_the_multiplier_is_stored_only_when_it_is_not_the_default() -> None:
    assert "multiplier" not in DEFAULT_POLICY.to_json()
    tripled = RetryPolicy.exponential(base=2, multiplier=3)
    assert tripled.to_json()["multiplier"] == 3
    assert RetryPolicy.from_json(tripled.to_json()) == tripled
    # a row written before the option reads as doubling
    assert RetryPolicy.from_json({"kind": "exponential", "base": 1, "maximum": 60}).multiplier == 2


def test_json_round_trip_and_coercion() -> None:
    for policy in (RetryPolicy.fixed(5), RetryPolicy.schedule(1, 2), DEFAULT_POLICY):
        assert RetryPolicy.from_json(policy.to_json()) == policy
    assert RetryPolicy.coerce([60, 300]) == RetryPolicy.schedule(60, 300)
    assert RetryPolicy.coerce(None) == DEFAULT_POLICY
    assert RetryPolicy.from_json(None) == DEFAULT_POLICY


@pytest.mark.parametrize(
    "bad",
    [
        {"kind": "sometimes"},
        {"kind": "schedule", "delays": []},
        {"kind": "schedule", "delays": "60"},
        {"kind": "fixed", "delay": -1},
        {"kind": "fixed", "delay": float("nan")},
        {"kind": "fixed", "delay": True},
        {"kind": "exponential", "multiplier": 0.5},
        {"kind": "exponential", "multiplier": 1000},
        {"kind": "exponential", "multiplier": "2"},
        {"kind": "exponential", "multiplier": float("inf")},
    ],
)
def test_bad_policies_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(InvalidRetryPolicyError):
        RetryPolicy.from_json(bad)


def test_coerce_refuses_strings() -> None:
    with pytest.raises(InvalidRetryPolicyError):
        RetryPolicy.coerce("60")  # type: ignore[arg-type]


def test_the_jitter_leaves_the_process_wide_random_generator_alone() -> None:
    # A delay computed in a worker's thread must not move the generator that
    # the rest of the process (a seeded simulation, a property-test engine) draws from.
    random.seed(7)
    before = random.getstate()
    delays = {RetryPolicy.exponential(base=2).delay_for(3) for _ in range(50)}
    assert random.getstate() == before
    assert len(delays) > 1 and all(8 <= d <= 10 for d in delays)
