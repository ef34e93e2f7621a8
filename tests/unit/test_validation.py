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
        ({"delay": -1}, "delay must be from 0 to"),
        ({"delay": "soon"}, "number of seconds"),
        ({"max_attempts": 0}, "max_attempts must be an integer from 1 to 10000"),
        ({"max_attempts": 10**10}, "max_attempts"),
        ({"max_attempts": 2.5}, "max_attempts"),
        ({"priority": 10}, "priority must be an integer from 0 to 9"),
        ({"queue": "a b"}, "queue"),
        ({"unique": True}, "needs a business_key"),
        ({"once": True}, "once=True needs a business_key"),
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


# -- hostile input: every refusal is an InvalidTaskError naming the field --------------


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"payload": {"k": "\ud800"}}, r"payload\['k'\]: not valid Unicode"),
        ({"payload": {"\udfff": 1}}, r"payload: key '\\udfff': not valid Unicode"),
        ({"payload": ["ok", {"deep": ["\ud83d"]}]}, r"payload\[1\]\['deep'\]\[0\]"),
        ({"payload": {"k": "a\x00b"}}, r"payload\['k'\]: contains a NUL"),
        ({"business_key": "order-\ud800"}, "business_key: not valid Unicode"),
        ({"business_key": "a\x00"}, "business_key: contains a NUL"),
        ({"kind": "k\ud800"}, "kind"),
        ({"queue": "q\ud800"}, "queue"),
        ({"payload": nested(65)}, "nested more than 64 levels"),
        ({"payload": nested(100_000)}, "nested more than 64 levels"),
        ({"payload": {1: "a", "1": "b"}}, "key 1 is not a string"),
        ({"payload": {None: 1}}, "key None is not a string"),
        ({"payload": {(1, 2): 1}}, r"key \(1, 2\) is not a string"),
        ({"payload": {"n": 10**4000}}, r"payload\['n'\]: an integer of more than 4000 digits"),
        ({"payload": [1e16]}, r"payload\[0\]: the float 1e\+16 is 1e16 or more"),
        ({"payload": [float("-inf")]}, "not JSON-serialisable"),
        ({"payload": {"b": b"bytes"}}, "a bytes"),
        ({"delay": 10**400}, "delay must be from 0 to"),
        ({"timeout": 10**400}, "timeout must be from 0 to"),
        ({"delay": 1e300}, "delay must be from 0 to"),
        ({"delay": float("nan")}, "delay must be from 0 to"),
        ({"retry": {"kind": "fixed", "delay": 10**400}}, "retry"),
        ({"retry": [10**400]}, "retry"),
        ({"retry": [1.0] * 1001}, "at most 1000 entries"),
        ({"unique": "yes", "business_key": "k"}, "unique must be True or False"),
        ({"once": 1, "business_key": "k"}, "once must be True or False"),
        ({"parent_id": 2**63}, "parent_id"),
        ({"shard": 2**15}, "shard"),
    ],
)
def test_hostile_input_is_refused_naming_the_field(options: dict[str, Any], field: str) -> None:
    base: dict[str, Any] = {"kind": "ok.kind", "payload": {}}
    base.update(options)
    with pytest.raises(InvalidTaskError, match=field):
        TaskSpec(**base)


def test_64_levels_of_nesting_and_long_integers_are_accepted() -> None:
    TaskSpec("ok.kind", nested(64))
    TaskSpec("ok.kind", {"n": 10**3999, "m": -(10**3999), "f": 9.999e15, "t": 1e-300})


def test_an_unknown_keyword_is_an_invalid_task_error_naming_it() -> None:
    with pytest.raises(InvalidTaskError, match="unknown task option 'dealy'"):
        TaskSpec("ok.kind", {}, dealy=5)  # type: ignore[call-arg]
    with pytest.raises(InvalidTaskError, match="positional"):
        TaskSpec("ok.kind", {}, "default", None)


def test_a_payload_that_postgresql_would_print_too_large_is_refused() -> None:
    # 1e-300 is 6 bytes of JSON, but PostgreSQL prints it with 300 zeros.
    with pytest.raises(PayloadTooLargeError, match="as PostgreSQL prints it"):
        TaskSpec("ok.kind", [1e-300] * 5000)


def test_a_permanent_key_is_not_also_a_live_one() -> None:
    # once=True: ledgerq_unique_keys covers live duplicates too, so the row carries no
    # dedupe_key (a live unique=True task of that key never blocks it, nor it them).
    params = TaskSpec("points.give", business_key="order-7", once=True, unique=True).params()
    assert (params["once"], params["dedupe_key"], params["business_key"]) == (
        True,
        None,
        "order-7",
    )
