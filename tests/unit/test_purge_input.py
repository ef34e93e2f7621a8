"""``ledgerq purge``'s (and ``admin.purge``'s) durations: what is read, what refused."""

from __future__ import annotations

from datetime import timedelta

import pytest

from ledgerq.admin import parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30d", timedelta(days=30)),
        ("12h", timedelta(hours=12)),
        ("90m", timedelta(minutes=90)),
        ("45s", timedelta(seconds=45)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        ("1.5d", timedelta(days=1.5)),
        (" 7D ", timedelta(days=7)),
    ],
)
def test_a_duration_is_read(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("soon", "cannot read 'soon' as a duration"),
        ("30", "cannot read '30' as a duration"),
        ("30days", "cannot read '30days'"),
        ("", "cannot read ''"),
        ("-3d", "cannot read '-3d'"),
        ("0d", "more than 0"),
        ("101y", "cannot read"),
        ("40000w", "at most 100 years"),
    ],
)
def test_anything_else_is_refused_naming_the_option(text: str, message: str) -> None:
    with pytest.raises(ValueError, match="--older-than") as refused:
        parse_duration(text, "--older-than")
    assert message in str(refused.value)
