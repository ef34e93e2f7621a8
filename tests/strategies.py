"""Hypothesis strategies for hostile producer input: JSON-ish payloads (and things
that only look like JSON) and task options, valid and not."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

#: Any code point, lone surrogates and NUL included.
any_text = st.text(st.characters(codec=None, min_codepoint=0), max_size=12)
numbers = st.one_of(
    st.integers(),
    st.integers(min_value=-(10**4100), max_value=10**4100),
    st.floats(),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
    st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e16, 9.999999999999998e15, 2**63, -(2**63)]),
)
leaves = st.one_of(
    st.none(),
    st.booleans(),
    numbers,
    any_text,
    st.text(max_size=12),
    st.binary(max_size=4),
    st.just(datetime(2030, 1, 1)),
    st.frozensets(st.integers(), max_size=2),
)
keys = st.one_of(
    st.text(max_size=6),
    any_text,
    st.integers(),
    st.none(),
    st.booleans(),
    st.tuples(st.integers()),
)


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth):
        value = [value]
    return value


payloads = st.one_of(
    st.recursive(
        leaves,
        lambda children: (
            st.lists(children, max_size=4)
            | st.tuples(children, children)
            | st.dictionaries(keys, children, max_size=4)
        ),
        max_leaves=25,
    ),
    st.integers(min_value=0, max_value=3000).map(nested),
)


def mostly(
    valid: st.SearchStrategy[Any], hostile: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    """``valid`` three times in four, else ``hostile``: enough accepted tasks to check
    their round trip, enough refused ones to check refusals."""
    return st.sampled_from([valid, valid, valid, hostile]).flatmap(lambda chosen: chosen)


seconds = mostly(
    st.none() | st.floats(0, 1e6) | st.integers(0, 10**6) | st.timedeltas(timedelta(0)),
    numbers | st.timedeltas(max_value=timedelta(days=5000)) | st.text(max_size=3),
)
aware = st.datetimes(
    timezones=st.builds(
        timezone, st.timedeltas(min_value=-timedelta(hours=23), max_value=timedelta(hours=23))
    )
    | st.just(UTC)
)
_options = st.fixed_dictionaries(
    {},
    optional={
        "queue": mostly(st.sampled_from(["default", "other"]), any_text),
        "business_key": mostly(
            st.none() | st.text(min_size=1, max_size=20), any_text | st.integers()
        ),
        "unique": mostly(st.booleans(), st.integers(0, 1) | st.none()),
        "once": mostly(st.booleans(), st.integers(0, 1) | st.none()),
        "run_at": mostly(st.none() | aware, st.datetimes()),
        "delay": seconds,
        "timeout": seconds,
        "priority": mostly(st.integers(0, 9), st.integers(-2, 12) | st.floats() | st.booleans()),
        "max_attempts": mostly(st.integers(1, 100), st.integers(-1, 10**12) | st.floats()),
        "retry": mostly(
            st.none() | st.lists(st.floats(0, 1000), min_size=1, max_size=3),
            st.lists(numbers, max_size=3)
            | st.dictionaries(
                st.sampled_from(["kind", "delay", "base", "maximum", "delays"]), leaves
            )
            | st.builds(dict, kind=st.just("fixed"), delay=numbers)
            | st.text(max_size=4),
        ),
        "shard": mostly(st.integers(0, 32767), st.integers(-2, 40000) | st.none()),
        "parent_id": mostly(st.none() | st.integers(1, 2**63 - 1), st.integers(-1, 2**64)),
    },
)
#: Options, and one time in ten a keyword that is not an option at all.
options = st.tuples(_options, st.sampled_from([False] * 9 + [True]), st.integers()).map(
    lambda t: {**t[0], "colour": t[2]} if t[1] else t[0]
)
kinds = mostly(st.sampled_from(["t.prop", "t.other"]), any_text | st.none() | st.integers())


def as_stored(value: Any) -> Any:
    """What an accepted payload comes back as: tuples become lists."""
    if isinstance(value, dict):
        return {k: as_stored(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [as_stored(v) for v in value]
    return value
