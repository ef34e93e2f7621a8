"""What a test looks at and moves: :func:`enqueued`, :func:`advance`, :func:`reset`.

``enqueued`` reads through the bind itself, in the caller's transaction, as
``enqueue`` writes: what the code under test enqueued is listed whether or not
it has committed. ``advance`` and ``reset`` commit on a connection of their own
(see :mod:`.binds`), so :func:`~ledgerq.testing.drain` sees what they did.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Coroutine, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.compose.storage import own_ledger_on
from ledgerq.ledger.binds import on_mysql
from ledgerq.ledger.executors import async_runner, runner
from ledgerq.testing.binds import resolve
from ledgerq.testing.queries import helper_params, helper_queries

T = TypeVar("T")

#: The most tasks :func:`enqueued` lists.
MAX_LISTED = 10_000


@dataclass(frozen=True)
class EnqueuedTask:
    """A task enqueued and not started yet (``pending``, or ``published`` by a relay)."""

    id: int
    kind: str
    queue: str
    payload: Any
    status: str
    priority: int
    run_at: datetime
    #: Whether ``run_at`` has come (by the database clock): a worker, or
    #: :func:`~ledgerq.testing.drain`, would run it now.
    due: bool
    #: Attempts made so far (a retry waiting for its backoff has at least 1).
    attempts: int
    #: None: left unset by the producer (the claim fills in the kind's default).
    max_attempts: int | None
    #: The retry policy as stored (``{"delays": [...]}``, ...), None for the default.
    retry: dict[str, Any] | None
    timeout_s: float | None
    business_key: str | None
    ordering_key: str | None
    parent_id: int | None
    #: The last failed attempt's error (a retry), else None.
    last_error: str | None
    created_at: datetime
    #: The task's tags (``enqueue(..., tags=[...])``), None when it has none.
    tags: list[str] | None = None
    #: When it expires unstarted (``enqueue(..., expires=...)``), None: never.
    expires_at: datetime | None = None


def _aware(value: datetime | None) -> datetime | None:
    """A MySQL ``DATETIME(6)`` (naive, UTC) as PostgreSQL's aware timestamp."""
    return value.replace(tzinfo=UTC) if value is not None and value.tzinfo is None else value


def _tags(value: Any) -> list[str] | None:
    """Tags as read: PostgreSQL's text[] (a list), MySQL's JSON (text)."""
    if value is None:
        return None
    return list(json.loads(value) if isinstance(value, str | bytes) else value)


def _record(row: Sequence[Any]) -> EnqueuedTask:
    (id_, kind, queue, payload, status, priority, run_at, due, attempts, max_attempts, retry,
     timeout_s, business_key, ordering_key, parent_id, last_error, created_at, tags,
     expires_at) = row  # fmt: skip
    return EnqueuedTask(
        int(id_),
        kind,
        queue,
        json.loads(payload),
        status,
        int(priority),
        _aware(run_at) or run_at,
        bool(due),
        int(attempts),
        None if max_attempts is None else int(max_attempts),
        None if retry is None else json.loads(retry),
        timeout_s,
        business_key,
        ordering_key,
        parent_id,
        last_error,
        _aware(created_at) or created_at,
        _tags(tags),
        _aware(expires_at),
    )


def _params(kind: str | None, queue: str | None, limit: int) -> dict[str, Any]:
    if not 1 <= limit <= MAX_LISTED:
        raise ValueError(f"limit must be 1..{MAX_LISTED}, got {limit!r}")
    return {"kind": kind, "queue": queue, "limit": limit}


def enqueued(
    bind: object, kind: str | None = None, *, queue: str | None = None, limit: int = 1000
) -> list[EnqueuedTask]:
    """The tasks enqueued and not started yet (of ``kind`` and ``queue``, when given),
    oldest first, as the bind's transaction sees them (its own uncommitted tasks
    included). ``bind``: a ``Session``, ``Connection``, psycopg connection, ... as
    :func:`~ledgerq.enqueue` takes, or an ``Engine``."""
    params = _params(kind, queue, limit)
    if isinstance(bind, Engine):
        with bind.connect() as conn:
            return enqueued(conn, kind, queue=queue, limit=limit)
    statement = helper_queries(on_mysql(bind)).enqueued
    return [_record(r) for r in runner(bind, "enqueued")(statement, params)]


async def aenqueued(
    bind: object, kind: str | None = None, *, queue: str | None = None, limit: int = 1000
) -> list[EnqueuedTask]:
    """:func:`enqueued` for an ``AsyncSession``, ``AsyncConnection``, psycopg
    ``AsyncConnection`` or ``AsyncEngine``."""
    params = _params(kind, queue, limit)
    if isinstance(bind, AsyncEngine):
        async with bind.connect() as conn:
            return await aenqueued(conn, kind, queue=queue, limit=limit)
    statement = helper_queries(on_mysql(bind)).enqueued
    rows = await async_runner(bind, "aenqueued")(statement, params)
    return [_record(r) for r in rows]


def selection(queues: Iterable[str] | None, kinds: Iterable[str] | None) -> dict[str, Any]:
    """``queues`` and ``kinds`` as the statements' parameters (None: every one)."""
    for name, value in (("queues", queues), ("kinds", kinds)):
        if isinstance(value, str):
            raise TypeError(f"{name} takes a list of names, not the string {value!r}")
    return {
        "queues": None if queues is None else sorted(set(queues)),
        "kinds": None if kinds is None else sorted(set(kinds)),
    }


def _advance_params(
    seconds: float, queues: Iterable[str] | None, kinds: Iterable[str] | None
) -> dict[str, Any]:
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or seconds < 0:
        raise ValueError(f"advance takes seconds >= 0, got {seconds!r}")
    return {"seconds": float(seconds), **selection(queues, kinds)}


def _moved(result: Any) -> int:
    """How many tasks ``advance`` moved: PostgreSQL's RETURNING rows, MySQL's row count
    (rows matched: SQLAlchemy's MySQL dialects count found rows)."""
    return len(result.all()) if result.returns_rows else int(result.rowcount)


def advance(
    bind: object,
    seconds: float,
    *,
    queues: Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> int:
    """Test-only: move time ``seconds`` forward for the pending tasks (of ``queues``
    and ``kinds``, when given): each one's ``run_at`` moves that much earlier, so
    a delayed task or a retry waiting for its backoff comes due as it would
    ``seconds`` from now. Returns how many tasks moved. Commits on a connection of
    its own. Never point it at a production database: it rewrites due times."""
    params = _advance_params(seconds, queues, kinds)
    target = resolve(bind, "advance")
    engine, dispose = target.open_sync()
    try:
        with engine.begin() as conn:
            statement = helper_queries(target.mysql).advance
            return _moved(conn.execute(statement, helper_params(params, target.mysql)))
    finally:
        if dispose:
            engine.dispose()


async def aadvance(
    bind: object,
    seconds: float,
    *,
    queues: Iterable[str] | None = None,
    kinds: Iterable[str] | None = None,
) -> int:
    """:func:`advance` from async code."""
    params = _advance_params(seconds, queues, kinds)
    target = resolve(bind, "aadvance")
    engine, dispose = target.open_async(reuse=True)
    try:
        async with engine.begin() as conn:
            statement = helper_queries(target.mysql).advance
            return _moved(await conn.execute(statement, helper_params(params, target.mysql)))
    finally:
        if dispose:
            await engine.dispose()


async def areset(bind: object) -> None:
    """Test-only: empty the ledger (live tasks, history, audit, subscriptions), as
    the storage seam's ``truncate`` does. Call it between tests."""
    await _reset(bind, "areset", reuse=True)


async def _reset(bind: object, name: str, *, reuse: bool) -> None:
    engine, dispose = resolve(bind, name).open_async(reuse=reuse)
    try:
        await own_ledger_on(engine).truncate()
    finally:
        if dispose:
            await engine.dispose()


def reset(bind: object) -> None:
    """:func:`areset` from sync code."""
    run_sync(_reset(bind, "reset", reuse=False), "reset")


def run_sync(coro: Coroutine[Any, Any, T], name: str) -> T:
    """Run ``coro`` in an event loop of its own; RuntimeError (naming the async
    variant) when called from a running loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    coro.close()
    raise RuntimeError(f"{name}() runs an event loop of its own: in async code, await a{name}()")
