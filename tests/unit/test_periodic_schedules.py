"""Periodic schedules without a database: period starts and the registry's checks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from ledgerq import Registry, RegistryError
from ledgerq.consumers.periodic import Schedule
from ledgerq.ledger.scheduling import RateLimit


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_every_aligns_periods_to_the_epoch_so_every_process_agrees() -> None:
    schedule = Schedule("t.report", every=300)
    assert schedule.latest_start(at("2026-11-23T18:12:30")) == at("2026-11-23T18:10:00")
    assert schedule.latest_start(at("2026-11-23T18:10:00")) == at("2026-11-23T18:10:00")
    assert schedule.latest_start(at("2026-11-23T18:09:59.999")) == at("2026-11-23T18:05:00")


def test_cron_periods_start_at_each_match_in_utc() -> None:
    schedule = Schedule("t.report", cron="*/5 * * * *")
    assert schedule.latest_start(at("2026-11-23T18:12:30")) == at("2026-11-23T18:10:00")
    assert schedule.latest_start(at("2026-11-23T18:10:00")) == at("2026-11-23T18:10:00")
    nightly = Schedule("t.nightly", cron="30 2 * * *")
    assert nightly.latest_start(at("2026-11-23T01:00:00")) == at("2026-11-22T02:30:00")


def test_each_period_has_one_permanent_key() -> None:
    spec = Schedule("t.report", every=60, queue="reports").task(at("2026-11-23T18:10:00"))
    assert (spec.business_key, spec.once, spec.queue) == (
        "periodic:2026-11-23T18:10:00+00:00",
        True,
        "reports",
    )
    assert spec.payload == {"period": "2026-11-23T18:10:00+00:00"}


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"every": 60, "cron": "* * * * *"}, "not both"),
        ({"every": 0}, "at least 1 second"),
        ({"every": "60"}, "at least 1 second"),
        ({"cron": "*/5 * * *"}, "bad cron"),
        ({"cron": "61 * * * *"}, "bad cron"),
        ({"rate_limit": "20/x"}, "rate_limit must look like"),
        ({"rate_limit": "0/s"}, "rate_limit must look like"),
        ({"burst": 5}, "burst needs a rate_limit"),
        ({"every": 60, "queue": "no spaces"}, "malformed"),
    ],
)
def test_the_registry_refuses_bad_scheduling_options(options: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match=message):
        Registry().task("t.k", **options)


def test_rate_limits_parse_per_second_minute_and_hour() -> None:
    assert RateLimit.parse("20/s") == RateLimit(20.0, 20.0)
    assert RateLimit.parse("120/m") == RateLimit(2.0, 2.0)
    assert RateLimit.parse("36/h", burst=3) == RateLimit(0.01, 3.0)
    registry = Registry()

    @registry.task("t.charge", rate_limit="20/s")
    def charge(payload: Any, ctx: Any) -> None: ...

    @registry.task("t.free")
    def free(payload: Any, ctx: Any) -> None: ...

    assert registry.rate_limits() == {"t.charge": RateLimit(20.0, 20.0)}
