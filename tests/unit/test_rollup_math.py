"""The rollup's arithmetic: buckets, their bounds, percentiles read from them, and
the rollup service's and the dashboard settings' validation."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledgerq.core.errors import ConfigError
from ledgerq.dashboard.auth import safe_next
from ledgerq.dashboard.settings import DashboardSettings, check_bind, is_loopback
from ledgerq.ledger.rollup import BUCKETS, bucket_of, bucket_upper, percentile
from ledgerq.relay.rollup import RollupConfig


@given(st.floats(min_value=0.0, max_value=10_000.0, allow_nan=False))
def test_a_duration_is_at_most_its_buckets_bound_and_over_the_one_below(seconds: float) -> None:
    bucket = bucket_of(seconds)
    assert 0 <= bucket < BUCKETS
    assert seconds < bucket_upper(bucket) * (1 + 1e-9)
    if bucket > 0:
        assert seconds >= bucket_upper(bucket - 1) * (1 - 1e-9)
        if bucket < BUCKETS - 1:
            ratio = bucket_upper(bucket) / bucket_upper(bucket - 1)
            assert ratio == pytest.approx(math.sqrt(2))


def test_percentiles_are_the_bound_of_the_bucket_that_reaches_them() -> None:
    durations = [0.01] * 90 + [0.5] * 9 + [30.0]
    counts: dict[int, int] = {}
    for d in durations:
        counts[bucket_of(d)] = counts.get(bucket_of(d), 0) + 1
    p50, p95, p99, p100 = (percentile(counts, p) for p in (0.5, 0.95, 0.99, 1.0))
    assert p50 == bucket_upper(bucket_of(0.01)) and 0.01 <= p50 < 0.01 * math.sqrt(2)
    assert p95 == p99 == bucket_upper(bucket_of(0.5))
    assert p100 == bucket_upper(bucket_of(30.0))
    assert percentile({}, 0.5) is None
    with pytest.raises(ValueError):
        percentile(counts, 0)
    assert bucket_upper(BUCKETS - 1) == float("inf")


def test_rollup_config_refuses_nonsense() -> None:
    for bad in ({"settle_s": 0}, {"max_span_s": 10}, {"backfill_s": -1}, {"keep_s": 60},
                {"budget_s": 0}):  # fmt: skip
        with pytest.raises(ValueError):
            RollupConfig(**bad)


def test_dashboard_settings_refuse_weak_values_and_never_print_secrets() -> None:
    for env, needle in (
        ({"LEDGERQ_DASHBOARD_PASSWORD": "short"}, "PASSWORD must be at least 8"),
        ({"LEDGERQ_DASHBOARD_TOKEN": "abc"}, "TOKEN must be at least 16"),
        ({"LEDGERQ_DASHBOARD_SECRET": "abc"}, "SECRET must be at least 32"),
        ({"LEDGERQ_DASHBOARD_USER": "a b"}, "USER must be"),
    ):
        with pytest.raises(ConfigError, match=needle):
            DashboardSettings.from_env(env)
    password, secret = "a long password", "k" * 40
    configured = DashboardSettings.from_env(
        {"LEDGERQ_DASHBOARD_PASSWORD": password, "LEDGERQ_DASHBOARD_SECRET": secret}
    )
    assert password not in repr(configured) and secret not in repr(configured)
    assert not configured.secret_generated and DashboardSettings().secret_generated


def test_only_loopback_is_served_without_authentication() -> None:
    assert all(is_loopback(h) for h in ("127.0.0.1", "::1", "localhost", "127.0.0.2"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "example.com"))
    check_bind("127.0.0.1", DashboardSettings())
    with pytest.raises(ConfigError, match=r"refusing to serve the dashboard on 0\.0\.0\.0"):
        check_bind("0.0.0.0", DashboardSettings())
    check_bind("0.0.0.0", DashboardSettings(token="t" * 20))


def test_after_sign_in_only_a_local_path_is_followed() -> None:
    assert safe_next("/tasks?kind=a") == "/tasks?kind=a"
    for bad in ("//evil.example", "https://evil.example", "/\\evil", "", None, "tasks"):
        assert safe_next(bad) == "/"
