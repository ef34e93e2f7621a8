"""What ``@task`` returns: the handler itself, callable as before, that can also
enqueue tasks of its kind with the kind's defaults.

``send_receipt.enqueue(session, {"order_id": 7})`` is
``enqueue(session, "send_receipt", {"order_id": 7}, **defaults)``, where the
defaults are the ``@task`` options a producer decides: ``queue``, ``priority``,
``expires``, ``unique`` and ``once``. Any option given to the call overrides the
kind's (``send_receipt.enqueue(s, p, priority=9)``), and every option
``enqueue`` takes is accepted and typed (:class:`~ledgerq.ledger.producer.EnqueueOptions`),
so a misspelt option is a mypy error before it is an
:class:`~ledgerq.core.errors.InvalidTaskError` at run time.

``max_attempts``, ``retry`` and ``timeout`` are not passed: the handle leaves them
unset, as a producer enqueueing by kind name does, and the claim fills them from
the kind's defaults, which every worker writes at its start (one rule, whichever
way the task was enqueued; docs/design.md, "Per-kind defaults"). Given to the
call, they override the kind's.

Bad options to ``@task`` raise :class:`~ledgerq.core.errors.InvalidTaskError`
naming the option (the registry turns it into a ``RegistryError``, also a
``ValueError``), at import, before any task is enqueued.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Generic, ParamSpec, TypeVar

from typing_extensions import Unpack

from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger import validation as v
from ledgerq.ledger.executors import AsyncExecutor, Executor
from ledgerq.ledger.model import KindDefaults
from ledgerq.ledger.producer import aenqueue, enqueue
from ledgerq.ledger.specs import EnqueueOptions, RetryLike, TaskSpec

P = ParamSpec("P")
R = TypeVar("R")


class TaskHandle(Generic[P, R]):
    """A registered handler: call it as the function it wraps, or enqueue its kind."""

    #: The wrapped function's (``functools.update_wrapper``).
    __name__: str
    __wrapped__: Callable[P, R]

    def __init__(self, fn: Callable[P, R], kind: str, options: Mapping[str, Any]) -> None:
        self.fn = fn
        self.kind = kind
        #: The options every enqueue of the handle passes unless the call overrides them.
        self.options: Mapping[str, Any] = dict(options)
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<task {self.kind!r}: {getattr(self.fn, '__qualname__', self.fn)!r}>"

    def _merged(self, options: Mapping[str, Any]) -> dict[str, Any]:
        return {**self.options, **options}

    def enqueue(
        self, executor: Executor, payload: Any = None, **options: Unpack[EnqueueOptions]
    ) -> int:
        """:func:`~ledgerq.enqueue` of this kind, in ``executor``'s transaction, with
        the kind's defaults under ``options``; the task's id."""
        return enqueue(executor, self.kind, payload, **self._merged(options))

    async def aenqueue(
        self, executor: AsyncExecutor, payload: Any = None, **options: Unpack[EnqueueOptions]
    ) -> int:
        """:meth:`enqueue` on an async executor (:func:`~ledgerq.aenqueue`)."""
        return await aenqueue(executor, self.kind, payload, **self._merged(options))

    def spec(self, payload: Any = None, **options: Unpack[EnqueueOptions]) -> TaskSpec:
        """A :class:`~ledgerq.TaskSpec` of this kind with its defaults, for
        :func:`~ledgerq.enqueue_many`."""
        return TaskSpec(self.kind, payload, **self._merged(options))


def kind_options(
    kind: str,
    *,
    queue: str,
    priority: int | None,
    max_attempts: int | None,
    retry: RetryLike,
    timeout: float | None,
    expires: float | timedelta | None,
    unique: bool,
    once: bool,
) -> tuple[dict[str, Any], KindDefaults]:
    """The ``@task`` options checked: what a handle's enqueue passes, and what the
    claim fills in. :class:`InvalidTaskError` naming the option."""
    options: dict[str, Any] = {"queue": v.check_name(queue, "queue")}
    if priority is not None:
        options["priority"] = v.check_priority(priority)
    if expires is not None:
        if not isinstance(expires, int | float | timedelta) or isinstance(expires, bool):
            raise InvalidTaskError(
                f"@task({kind!r}): expires must be seconds (a number or a timedelta), "
                f"got {expires!r}"
            )
        seconds = v.check_optional_seconds(expires, "expires")
        if not seconds:
            raise InvalidTaskError(f"@task({kind!r}): expires must be more than 0 seconds")
        options["expires"] = seconds
    if v.check_flag(unique, "unique"):
        options["unique"] = True
    if v.check_flag(once, "once"):
        options["once"] = True
    defaults = KindDefaults(
        max_attempts=None if max_attempts is None else v.check_max_attempts(max_attempts),
        retry=None if retry is None else v.check_retry(retry).to_json(),
        timeout_s=v.check_optional_seconds(timeout, "timeout"),
    )
    return options, defaults
