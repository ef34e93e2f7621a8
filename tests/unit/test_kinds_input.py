"""Issue 26's bad input, refused before anything is written: expiry, tags, per-kind
options on ``@task``, and the options of a handle's enqueue; each error names the
option. And what a handle is: the function, plus its kind's enqueue options."""

from __future__ import annotations

import dataclasses
import inspect
import typing
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from ledgerq import InvalidTaskError, Registry, TaskSpec
from ledgerq.consumers.handles import TaskHandle
from ledgerq.consumers.registry import RegistryError
from ledgerq.core.errors import InvalidFilterError
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.specs import EnqueueOptions

PAST = datetime(2020, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"expires": PAST}, "expires is in the past"),
        ({"expires": 0}, "expires must be more than 0 seconds"),
        ({"expires": -5}, "expires must be from 0 to"),
        ({"expires": "1h"}, "expires must be a number of seconds"),
        ({"expires": datetime(2999, 1, 1)}, "timezone-aware"),
        ({"expires": 60, "delay": 120}, "expires (60 s) is not after delay"),
        (
            {"expires": 60, "run_at": datetime.now(UTC) + timedelta(hours=1)},
            "is not after run_at",
        ),
        ({"tags": "tenant:7"}, "tags must be a list of strings"),
        ({"tags": ["a,b"]}, "may not contain a comma"),
        ({"tags": ["x" * 65]}, "at most 64 characters"),
        ({"tags": [""]}, "non-empty string"),
        ({"tags": [7]}, "non-empty string"),
        ({"tags": [" padded"]}, "whitespace"),
        ({"tags": [f"t{i}" for i in range(33)]}, "at most 32 tags"),
        ({"expire": 60}, "unknown task option 'expire'"),
        ({"max_attempts": "3"}, "max_attempts must be an integer"),
    ],
)
def test_bad_expiry_and_tags_are_refused_naming_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidTaskError) as err:
        TaskSpec("k", {}, **options)
    assert message in str(err.value)


def test_unset_options_are_stored_as_null_and_given_ones_as_given() -> None:
    unset = TaskSpec("k").params()
    assert (unset["max_attempts"], unset["retry"], unset["timeout_s"]) == (None, None, None)
    assert (unset["expires_at"], unset["expires_s"], unset["tags"]) == (None, None, None)
    later = datetime.now(UTC) + timedelta(days=1)
    given = TaskSpec("k", max_attempts=2, expires=later, tags=("a", "b", "a")).params()
    assert (given["max_attempts"], given["expires_at"], given["tags"]) == (2, later, ["a", "b"])
    assert TaskSpec("k", expires=timedelta(minutes=5)).params()["expires_s"] == 300.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"priority": 10}, "priority must be an integer from 0 to 9"),
        ({"max_attempts": 0}, "max_attempts must be an integer"),
        ({"retry": "often"}, "retry"),
        ({"expires": 0}, "expires must be more than 0 seconds"),
        ({"expires": PAST}, "expires must be seconds"),
        ({"unique": "yes"}, "unique must be True or False"),
        ({"queue": "bad queue"}, "queue"),
        ({"timeout": -1}, "timeout must be from 0"),
    ],
)
def test_bad_kind_defaults_fail_at_registration_naming_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(RegistryError) as err:
        Registry().task("k", **options)
    assert message in str(err.value)


def test_an_unknown_task_option_is_a_type_error_at_registration() -> None:
    with pytest.raises(TypeError, match="expire"):
        Registry().task("k", expire=60)  # type: ignore[call-arg]


def test_a_handle_is_the_function_and_carries_the_kinds_enqueue_options() -> None:
    app = Registry()

    @app.task("quote", queue="other", priority=7, expires=90, unique=True, max_attempts=3)
    def quote(payload: dict[str, Any], ctx: object) -> int:
        """Price a quote."""
        return len(payload)

    assert isinstance(quote, TaskHandle)
    assert quote({"a": 1}, None) == 1
    assert (quote.__name__, quote.__doc__) == ("quote", "Price a quote.")
    assert list(inspect.signature(quote).parameters) == ["payload", "ctx"]
    assert dict(quote.options) == {"queue": "other", "priority": 7, "expires": 90.0, "unique": True}
    handler = app.get("quote")
    assert handler is not None and handler.fn is quote.fn
    assert app.defaults() == {"quote": KindDefaults(max_attempts=3)}
    spec = quote.spec({"a": 1}, business_key="q-1", priority=2)
    assert (spec.kind, spec.queue, spec.priority, spec.unique) == ("quote", "other", 2, True)
    with pytest.raises(InvalidTaskError, match="unique=True needs a business_key"):
        quote.spec({})


def test_async_handlers_stay_coroutine_functions_under_the_handle() -> None:
    app = Registry()

    @app.task("later")
    async def later(payload: Any, ctx: Any) -> None: ...

    handler = app.get("later")
    assert handler is not None and handler.is_async
    assert inspect.iscoroutinefunction(later.fn)


def test_the_typed_enqueue_options_are_exactly_the_task_specs_fields() -> None:
    names = [f.name for f in dataclasses.fields(TaskSpec)][2:]  # after kind and payload
    assert sorted(typing.get_type_hints(EnqueueOptions)) == sorted(names)


@pytest.mark.parametrize(
    ("tags", "message"),
    [(("a,b",), "comma"), (("",), "non-empty"), ("tenant:7", "list of tags")],
)
def test_a_bad_tag_filter_is_an_invalid_filter_error(tags: Any, message: str) -> None:
    with pytest.raises(InvalidFilterError, match=message):
        TaskFilter(tags=tags)
    assert TaskFilter(tags=("a", "a", "b")).params(10)["tags"] == ["a", "b"]
