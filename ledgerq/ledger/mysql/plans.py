"""The MySQL ledger's operations as plans, and what drives them: a plan is an
I/O-free generator of named statements, each sent the :class:`Answer` of the one
before, driven on a connection by :func:`drive` (sync: the producer's Session, a
handler's) or :func:`adrive` (async: the services' own transactions, an async
producer), through a :func:`runner` or :func:`async_runner` for the caller's
executor (SQLAlchemy's, or a raw DB-API connection).

One plan per operation, so the producer's sync and async paths and the ledger's
own run the same steps: the producer's insert (:mod:`.inserts`), the worker's
claims (:mod:`.claims`), the end of an attempt, its heartbeat and checkpoint
(:mod:`.attempts`), and the plans of the modules of their own (relay,
reconciler, operations, ...). MySQL has no ``RETURNING``: an answer carries the
rows a statement returned, the rows it reported changed (or matched) and the id
its insert generated (the driver's ``lastrowid``). A batch is sent as one JSON
object keyed by task id (:func:`keyed`, fragments.sql ``field``).

The plans never begin, commit or roll back: the caller's transaction holds their
locks to its end. A statement's error is raised inside the plan at its
``yield``, which may catch it (a duplicate key, which MySQL rolls back alone).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Generator, Mapping
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Connection, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session

from ledgerq.ledger.mysql.answer import Answer as Answer

R = TypeVar("R")
Step = tuple[TextClause, Mapping[str, Any]]


Plan = Generator[Step, Answer, R]
Runner = Callable[[TextClause, Mapping[str, Any]], Answer]
AsyncRunner = Callable[[TextClause, Mapping[str, Any]], Awaitable[Answer]]


def _answer(result: Any) -> Answer:
    rows = result.all() if result.returns_rows else []
    last_id = getattr(result, "lastrowid", None)
    return Answer(rows, int(result.rowcount), int(last_id) if last_id else None)


def drive(plan: Plan[R], run: Runner) -> R:
    """Run ``plan``'s statements on ``run``; a statement's error is raised inside the
    plan (at its ``yield``), which may catch it: a duplicate key, say, which
    MySQL rolls back alone, leaving the transaction as it was before it."""
    try:
        step = next(plan)
        while True:
            try:
                answer = run(*step)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(answer)
    except StopIteration as stop:
        done: R = stop.value
        return done


async def adrive(plan: Plan[R], run: AsyncRunner) -> R:
    """:func:`drive` on an async runner."""
    try:
        step = next(plan)
        while True:
            try:
                answer = await run(*step)
            except Exception as exc:
                step = plan.throw(exc)
            else:
                step = plan.send(answer)
    except StopIteration as stop:
        done: R = stop.value
        return done


SYNC_ACCEPTED = (
    "a SQLAlchemy Session, scoped_session or Connection on the MySQL ledger, a PyMySQL "
    "or mysqlclient (MySQLdb) connection, or Django's connection on its MySQL backend"
)
ASYNC_ACCEPTED = (
    "a SQLAlchemy AsyncSession, async_scoped_session or AsyncConnection, or an aiomysql connection"
)


def _refused(caller: str, executor: object, accepted: str, hint: str = "") -> TypeError:
    kind = type(executor)
    return TypeError(
        f"{caller}() takes {accepted} in an open transaction; got "
        f"{kind.__module__}.{kind.__qualname__}{hint}"
    )


def runner(executor: object, caller: str) -> Runner:
    """How ``caller`` runs a statement on the caller's sync ``executor``: a SQLAlchemy
    one, or a raw DB-API connection (:mod:`ledgerq.ledger.mysql.raw`, imported only
    then), Django's included."""
    if isinstance(executor, scoped_session):
        executor = executor()
    if isinstance(executor, Session | Connection):
        bound = executor

        def run(statement: TextClause, params: Mapping[str, Any]) -> Answer:
            return _answer(bound.execute(statement, params))

        return run
    if isinstance(executor, AsyncSession | AsyncConnection | async_scoped_session):
        raise _refused(caller, executor, SYNC_ACCEPTED, f": use a{caller}() for it")
    from ledgerq.ledger.mysql import raw

    connection = raw.django_connection(executor, caller)
    if raw.is_connection(connection):
        return partial(raw.answer, connection)
    if raw.is_async_connection(connection):
        raise _refused(caller, executor, SYNC_ACCEPTED, f": use a{caller}() for it")
    raise _refused(caller, executor, SYNC_ACCEPTED)


def async_runner(executor: object, caller: str) -> AsyncRunner:
    """How ``caller`` runs a statement on the caller's async ``executor``: a SQLAlchemy
    one, or an aiomysql connection."""
    if isinstance(executor, async_scoped_session):
        executor = executor()
    if isinstance(executor, AsyncSession | AsyncConnection):
        bound = executor

        async def run(statement: TextClause, params: Mapping[str, Any]) -> Answer:
            return _answer(await bound.execute(statement, params))

        return run
    sync_name = caller.removeprefix("a")
    if isinstance(executor, Session | Connection | scoped_session):
        raise _refused(caller, executor, ASYNC_ACCEPTED, f": use {sync_name}() for it")
    from ledgerq.ledger.mysql import raw

    if raw.is_async_connection(executor):
        return partial(raw.aanswer, executor)
    if raw.is_django(executor):
        hint = (
            ": Django's database connections are sync: call enqueue() (from async code, "
            "through asgiref's sync_to_async)"
        )
        raise _refused(caller, executor, ASYNC_ACCEPTED, hint)
    if raw.is_connection(executor):
        raise _refused(caller, executor, ASYNC_ACCEPTED, f": use {sync_name}() for it")
    raise _refused(caller, executor, ASYNC_ACCEPTED)


def keyed(entries: Mapping[int, Mapping[str, Any]]) -> str:
    """A batch as one JSON object keyed by task id (fragments.sql ``field``), each
    entry without its None fields."""
    return json.dumps(
        {str(k): {f: v for f, v in entry.items() if v is not None} for k, entry in entries.items()}
    )
