"""Property: any payload and options give a valid TaskSpec or an InvalidTaskError,
never another exception type. (The database's side is in
tests/integration/test_enqueue_properties.py.)"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledgerq import InvalidTaskError, TaskSpec
from tests.strategies import kinds, options, payloads


# Deep payloads (up to 3,000 levels) have reprs of tens of kB; Hypothesis warns when
# it builds one (for its report), which says nothing about the code under test.
@pytest.mark.filterwarnings(
    "ignore:Generating overly large repr:hypothesis.errors.HypothesisWarning"
)
@settings(
    max_examples=600,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(kind=kinds, payload=payloads, opts=options)
def test_a_task_spec_is_built_or_refused_with_an_invalid_task_error(
    kind: Any, payload: Any, opts: dict[str, Any]
) -> None:
    try:
        spec = TaskSpec(kind, payload, **opts)
    except InvalidTaskError as exc:
        assert str(exc)  # a message, naming what was refused
        return
    params = spec.params()
    assert params["kind"] == kind and isinstance(params["payload"], str)
    assert "colour" not in opts  # an unknown keyword is never accepted


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.integers(min_value=0, max_value=100_000))
def test_any_nesting_depth_is_accepted_or_refused_without_recursion_errors(depth: int) -> None:
    value: Any = 0
    for _ in range(depth):
        value = {"k": value} if depth % 2 else [value]
    try:
        TaskSpec("t.deep", value)
    except InvalidTaskError as exc:
        assert depth > 64 and "nested more than 64 levels" in str(exc)
    else:
        assert depth <= 64
