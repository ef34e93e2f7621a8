from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledgerq import MAX_PAYLOAD_BYTES, InvalidTaskError, PayloadTooLargeError, TaskSpec


def test_a_good_spec_gives_insert_parameters() -> None:
    params = TaskSpec(
        "mail.send",
        {"to": "a@b"},
        delay=timedelta(seconds=5),
        priority=3,
        business_key="order-1",
        unique=True,
        retry=[1, 2],
    ).params()
    assert params["kind"] == "mail.send"
    assert params["payload"] == '{"to":"a@b"}'
    assert params["delay_s"] == 5.0 and params["run_at"] is None
    assert params["dedupe_key"] == "order-1"
    assert params["retry"] == '{"kind": "schedule", "delays": [1.0, 2.0]}'


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"kind": ""}, "kind must be a non-empty string"),
        ({"kind": "has space"}, "malformed"),
        ({"kind": "9starts-with-digit"}, "malformed"),
        ({"kind": None}, "kind must be a non-empty string"),
        ({"payload": {"when": datetime.now()}}, "not JSON-serialisable"),
        ({"payload": {1, 2}}, "not JSON-serialisable"),
        ({"payload": float("nan")}, "not JSON-serialisable"),
        ({"delay": -1}, "zero or more seconds"),
        ({"delay": "soon"}, "number of seconds"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 10000"),
        ({"max_attempts": 10**10}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"priority": 10}, "priority must be an integer from 0 to 9"),
        ({"queue": "a b"}, "queue"),
        ({"unique": True}, "needs a business_key"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": datetime.now(UTC), "delay": 1}, "not both"),
        ({"timeout": -5}, "timeout"),
        ({"retry": "fast"}, "retry policy"),
    ],
)
def test_bad_input_is_refused_with_a_clear_message(options: dict[str, Any], message: str) -> None:
    base: dict[str, Any] = {"kind": "ok.kind", "payload": {}}
    base.update(options)
    with pytest.raises(InvalidTaskError, match=message):
        TaskSpec(**base)


def test_an_escaped_backslash_before_u0000_is_not_a_nul() -> None:
    TaskSpec("ok.kind", {"path": "C:\\u0000x"})  # a backslash, then the text u0000


def test_oversize_payload_is_refused_with_its_size() -> None:
    with pytest.raises(PayloadTooLargeError, match=str(MAX_PAYLOAD_BYTES)):
        TaskSpec("big", {"blob": "x" * MAX_PAYLOAD_BYTES})
