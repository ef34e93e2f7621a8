"""The direct path's settings are validated where they are made."""

from __future__ import annotations

import pytest

from ledgerq.consumers.direct import DirectConfig, FallbackConfig


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"batch": 0}, "direct batch must be 1..10000"),
        ({"poll_s": 0}, "direct poll_s"),
        ({"poll_s": 61}, "direct poll_s"),
        ({"aging_s": -1}, "aging_s"),
        ({"backoff_s": 0}, "backoff_s"),
    ],
)
def test_a_bad_direct_config_is_refused(options: dict[str, float], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        DirectConfig(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"after_s": 0}, "broker fallback"),
        ({"after_s": 4000}, "broker fallback"),
        ({"check_s": 0}, "check_s"),
    ],
)
def test_a_bad_fallback_config_is_refused(options: dict[str, float], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        FallbackConfig(**options)


def test_the_defaults_are_valid() -> None:
    assert DirectConfig().batch == 100 and FallbackConfig().after_s == 10.0
