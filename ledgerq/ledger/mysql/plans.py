"""The MySQL ledger's operations as plans: I/O-free generators of named statements,
each sent the :class:`Answer` of the one before, driven on a connection by
:func:`drive` (sync: the producer's Session, a handler's) or :func:`adrive`
(async: the services' own transactions, an async producer).

One plan per operation, so the producer's sync and async paths and the ledger's
own run the same steps. MySQL has no ``RETURNING``: an answer carries the rows a
statement returned, the rows it reported changed (or matched) and the id its
insert generated (the driver's ``lastrowid``).

The plans never begin, commit or roll back: the caller's transaction holds their
locks to its end.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from functools import partial
from typing import Any, TypeVar

from sqlalchemy import Connection, TextClause
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
from sqlalchemy.orm import Session, scoped_session

from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.after import After
from ledgerq.ledger.model import ClaimedTask, Fence, Finished, Held, Outcome
from ledgerq.ledger.mysql import batch, dependencies, expiry, families, metering
from ledgerq.ledger.mysql.answer import Answer as Answer
from ledgerq.ledger.mysql.base import error_number, micros
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.mysql.relay_pick import Candidate, direct_window, kept
from ledgerq.ledger.mysql.rows import claimed_tasks
from ledgerq.ledger.specs import TaskSpec

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


#: ER_DUP_ENTRY: an insert met a unique key's holder.
DUPLICATE_KEY = 1062
#: How often an insert that met a live duplicate is tried again when the holder
#: ended before it could be read (it can end only once per try).
_KEY_TRIES = 5


def duplicate_key(exc: BaseException) -> bool:
    """Whether ``exc`` (SQLAlchemy's, or a raw driver's) is MySQL's duplicate key."""
    return error_number(getattr(exc, "orig", None) or exc) == DUPLICATE_KEY


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


# -- the producer's insert ------------------------------------------------------------


def insert_params(spec: TaskSpec) -> dict[str, Any]:
    """The insert's parameters for ``spec`` (validated): every TaskSpec field is
    stored on MySQL as on PostgreSQL."""
    params = spec.params()
    params["run_at"] = utc(params["run_at"])
    params["delay_us"] = micros(params.pop("delay_s") or 0.0)
    params["expires_at"] = utc(params["expires_at"])
    expires_s = params.pop("expires_s")
    params["expires_us"] = None if expires_s is None else micros(expires_s)
    params["trace_context"] = (
        None if params["trace_context"] is None else json.dumps(params["trace_context"])
    )
    params["tags"] = None if params["tags"] is None else json.dumps(list(params["tags"]))
    return params


def enqueue_one(params: dict[str, Any]) -> Plan[tuple[int, bool]]:
    """Insert one task (parameters from :func:`insert_params`): its id and True, or,
    when it met a duplicate (``unique``, ``once``), the id of the task holding the
    key and False (nothing inserted).

    Plain inserts, the duplicate's error caught (MySQL rolls back the failed
    statement alone): a producer needs no UPDATE right on what a task is.
    Races: a producer whose insert meets another's uncommitted key waits on the
    unique index until that one commits (its insert then fails: it meets the
    task) or rolls back (its insert goes in). A ``unique`` task that met a live
    holder reads it with a lock; if the holder ended between the two (history
    keeps no de-duplication key), the insert is tried again."""
    key = {"kind": params["kind"], "business_key": params["business_key"]}
    if params["once"]:
        holder = yield from _take_once_key(key)
        if holder is not None:
            return holder, False
    for _ in range(_KEY_TRIES):
        try:
            inserted = yield MQ.insert_task, params
        except Exception as exc:
            if params["dedupe_key"] is None or not duplicate_key(exc):
                raise
            met = yield from _met_live_duplicate(params)
            if met is None:
                continue  # the holder ended meanwhile: its key is free again
            return met, False
        if inserted.last_id is None:
            raise LedgerqError(f"the insert of {params['kind']!r} returned no id")
        task_id = inserted.last_id
        if params["shard"] is None:
            yield MQ.shard_task, {"id": task_id, "shards": params["shards"]}
        if params["once"]:
            yield MQ.set_once_task, {**key, "task_id": task_id}
        return task_id, True
    raise LedgerqError(
        f"the key {params['dedupe_key']!r} of {params['kind']!r} was met {_KEY_TRIES} times "
        "by tasks that ended before they could be read"
    )


def _take_once_key(key: dict[str, Any]) -> Plan[int | None]:
    """Take the permanent key ``key``: None, or the id of the task already holding it."""
    try:
        yield MQ.take_once_key, key
    except Exception as exc:
        if not duplicate_key(exc):
            raise
        held = yield MQ.once_task_id, key
        holder = held.rows[0][0] if held.rows else None
        if holder is None:
            raise LedgerqError(
                f"the permanent key of {key['kind']!r} {key['business_key']!r} is held by no task"
            ) from None
        return int(holder)
    return None


def _met_live_duplicate(params: dict[str, Any]) -> Plan[int | None]:
    """The live task an insert's key met (share-locked); None if it ended meanwhile."""
    held = yield MQ.live_task_by_key, params
    return int(held.rows[0][0]) if held.rows else None


def enqueue_many(specs: Sequence[TaskSpec]) -> Plan[list[int]]:
    """Insert ``specs`` in order: the new ids, in input order (duplicates left out);
    every spec is validated, and the tasks named in ``after`` locked
    (:func:`.dependencies.check`), before the first insert.

    The tasks without a de-duplication key go in batches of one statement each
    (:mod:`ledgerq.ledger.mysql.batch`: ``INSERT ... SELECT FROM JSON_TABLE``, then
    one update of the shards to take from the ids) where the server can give
    the ids back: consecutive from the first under ``innodb_autoinc_lock_mode``
    0 or 1 (MariaDB's default), or by ``RETURNING id`` on MariaDB otherwise. A
    ``unique`` or ``once`` task between them takes the single insert, in its
    place in the order. On MySQL under its default mode 2 ("interleaved"), which
    has no ``RETURNING``: one insert per task, an id per row from the driver.
    The server is asked once per call, and only when a batch of two or more
    tasks is to be inserted. The tasks with ``after`` then wait
    (:func:`.dependencies.add`)."""
    rows = [insert_params(spec) for spec in specs]
    afters = [spec.dependencies() for spec in specs]
    yield from dependencies.check(afters)
    yield from families.open_families(params["parent_id"] for params in rows)
    position = {id(params): k for k, params in enumerate(rows)}
    ids: list[int] = []
    new: dict[int, After] = {}
    back: batch.IdsBack | None = None
    for batched, run in batch.runs(rows):
        if batched and len(run) > 1:
            if back is None:
                asked = yield batch.MB.server_batch_ids, {}
                returning, consecutive, step = asked.rows[0]
                back = batch.IdsBack(bool(consecutive), bool(returning), int(step))
            if back.batches:
                run_ids = yield from _insert_batch(run, back)
                ids.extend(run_ids)
                for task_id, params in zip(run_ids, run, strict=True):
                    after = afters[position[id(params)]]
                    if after is not None:
                        new[task_id] = after
                continue
        for params in run:
            task_id, inserted = yield from enqueue_one(params)
            if inserted:
                ids.append(task_id)
                after = afters[position[id(params)]]
                if after is not None:
                    new[task_id] = after
    yield from dependencies.add(new)
    return ids


def _insert_batch(run: Sequence[dict[str, Any]], back: batch.IdsBack) -> Plan[list[int]]:
    """One batch in one statement: its ids in input order (the ids a statement
    generates increase in its rows' order: consecutive, ``back.step`` apart, from
    the first where the lock mode makes them so, else returned and sorted)."""
    rows = {"rows": batch.rows_json(run)}
    if back.consecutive:
        inserted = yield batch.MB.insert_task_rows, rows
        if inserted.last_id is None or inserted.count != len(run):
            raise LedgerqError(f"a batch of {len(run)} tasks inserted {inserted.count}")
        ids = [inserted.last_id + i * back.step for i in range(len(run))]
    else:
        inserted = yield batch.INSERT_RETURNING, rows
        ids = sorted(int(r[0]) for r in inserted.rows)
    if len(ids) != len(run):
        raise LedgerqError(f"a batch of {len(run)} tasks returned {len(ids)} ids")
    unsharded: dict[int, list[int]] = {}
    for task_id, params in zip(ids, run, strict=True):
        if params["shard"] is None:
            unsharded.setdefault(int(params["shards"]), []).append(task_id)
    for shards, shard_ids in unsharded.items():
        yield batch.MB.shard_task_rows, {"ids": shard_ids, "shards": shards}
    return ids


def enqueue_single(spec: TaskSpec) -> Plan[int]:
    """One task: its id, or the id of the task holding its key (nothing inserted)."""
    params = insert_params(spec)
    after = spec.dependencies()
    yield from dependencies.check([after])
    yield from families.open_families([params["parent_id"]])
    task_id, _ = yield from enqueue_one(params)
    if after is not None:
        yield from dependencies.add({task_id: after})
    return task_id


# -- claims ---------------------------------------------------------------------------


def _keyed(entries: Mapping[int, Mapping[str, Any]]) -> str:
    """A batch as one JSON object keyed by task id (fragments.sql ``field``), each
    entry without its None fields."""
    return json.dumps(
        {str(k): {f: v for f, v in entry.items() if v is not None} for k, entry in entries.items()}
    )


def _claim(
    ids: list[int], worker: str, lease_s: float, max_payload_bytes: int
) -> Plan[list[ClaimedTask]]:
    """Claim the rows ``ids`` the plan locked, and read what the claim answers; those
    past their expiry end instead (:func:`.expiry.end_expired`), as on PostgreSQL."""
    ended = set((yield from expiry.end_expired(ids)))
    ids = [i for i in ids if i not in ended]
    if not ids:
        return []
    params = {"ids": ids, "worker": worker, "lease_us": micros(lease_s)}
    yield MQ.claim_locked, params
    answer = yield MQ.claimed, {"ids": ids, "max_payload_bytes": max_payload_bytes}
    return claimed_tasks(answer.rows)


def claim_fenced(
    fences: Sequence[Fence], worker: str, lease_s: float, max_payload_bytes: int
) -> Plan[list[ClaimedTask]]:
    """The broker path's claim: the rows still at their message's epoch, pending or
    published and due, locked (waiting for a holder), then claimed."""
    epochs = dict(sorted(fences))
    if not epochs:
        return []
    batch = _keyed({i: {"epoch": e} for i, e in epochs.items()})
    locked = yield MQ.lock_fenced, {"ids": list(epochs), "batch": batch}
    return (yield from _claim([int(r[0]) for r in locked.rows], worker, lease_s, max_payload_bytes))


def pick_params(
    queues: Sequence[str],
    kinds: Iterable[str] | None,
    shards: Iterable[int] | None,
    excluded: Iterable[str],
    aging_s: float,
    min_wait_s: float,
    limit: int,
) -> dict[str, Any]:
    """The parameters of the pick rule (fragments.sql ``due_pick``): the due pending
    tasks of ``queues``, of ``kinds`` and ``shards`` (None: all), not of ``excluded``,
    due ``min_wait_s`` or longer, aged after ``aging_s`` (0: no aging); ``limit``."""
    return {
        "queues": list(queues),
        "every_kind": kinds is None,
        "kinds": sorted(kinds or ()),
        "every_shard": shards is None,
        "shards": sorted(shards or ()),
        "none_excluded": not excluded,
        "excluded": sorted(excluded),
        "aging_us": micros(aging_s),
        "min_wait_us": micros(min_wait_s),
        "limit": limit,
    }


def claim_due(
    queues: Sequence[str],
    kinds: Sequence[str] | None,
    limit: int,
    aging_s: float,
    worker: str,
    lease_s: float,
    max_payload_bytes: int,
) -> Plan[list[ClaimedTask]]:
    """The direct claim: read the candidates by the relay's rule (:func:`pick_params`;
    a rate-limited kind's only through its bucket, :mod:`.metering`), keep them as
    the relay keeps a window's (:func:`.relay_pick.kept`), lock those still pending
    (SKIP LOCKED), debit the buckets, claim what was locked."""
    if not queues or limit < 1:
        return []
    buckets = yield from metering.take()
    params = pick_params(queues, kinds, None, buckets.metered, aging_s, 0.0, limit)
    ordinary = yield MQ.due_candidates, params
    metered: list[Sequence[Any]] = []
    for kind in buckets.open():
        if kinds is None or kind in kinds:
            params = pick_params(queues, [kind], None, (), 0.0, 0.0, min(limit, buckets.caps[kind]))
            metered.extend((yield MQ.due_candidates, params).rows)
    if not metered:  # the rule's own order, as read: nothing to merge
        chosen = [(int(r[0]), str(r[1])) for r in ordinary.rows]
    else:
        window = direct_window(limit)
        candidates = [Candidate.of(window, row) for row in [*ordinary.rows, *metered]]
        chosen = [(c.id, c.kind) for c in kept(candidates, limit, buckets.caps)]
    if not chosen:
        return []
    locked = yield MQ.lock_due, {"ids": [i for i, _ in chosen]}
    ids = [int(r[0]) for r in locked.rows]
    won = set(ids)
    yield from metering.debit(buckets, Counter(kind for i, kind in chosen if i in won))
    return (yield from _claim(ids, worker, lease_s, max_payload_bytes))


# -- finish and heartbeat ---------------------------------------------------------------


def finish(outcomes: Sequence[Outcome]) -> Plan[list[Finished]]:
    """How attempts ended, one verdict per row, fenced: lock the rows still running
    under their fences and decide where each goes (lock_finishing, which also reads
    the database's clock: the attempts' end), then bury what ends (and judge the
    tasks waiting for them and their families: :func:`.families.after_ended`) and send the rest
    back to pending."""
    verdicts = {o.id: o for o in sorted(outcomes, key=lambda o: o.id)}
    if not verdicts:
        return []
    batch = _keyed({i: {"epoch": o.epoch, "verdict": o.verdict} for i, o in verdicts.items()})
    locked = yield MQ.lock_finishing, {"ids": list(verdicts), "batch": batch}
    ended: dict[int, dict[str, Any]] = {}
    retried: dict[int, dict[str, Any]] = {}
    finished = []
    at = locked.rows[0][5] if locked.rows else None
    for row in locked.rows:
        task_id, kind, attempts, last_error, ended_as, _ = row
        outcome = verdicts[int(task_id)]
        if ended_as is not None:
            error = outcome.error if outcome.error is not None else last_error
            ended[int(task_id)] = {
                "ended_as": ended_as,
                "error": outcome.error,
                "result": outcome.result,
                "attempt_error": outcome.error,
                "outcome": ended_as,
            }
            finished.append(Finished(int(task_id), kind, int(attempts), str(ended_as), error))
        else:
            released = outcome.verdict == "release"
            retried[int(task_id)] = {
                "delay_us": micros(outcome.delay),
                "error": outcome.error,
                "attempt_error": outcome.error,
                "outcome": "released" if released else "retry",
            }
            left = max(int(attempts) - 1, 0) if released else int(attempts)
            finished.append(Finished(int(task_id), kind, left, "pending", outcome.error))
    if ended:
        ids = {"ids": list(ended), "batch": _keyed(ended), "at": at}
        yield MQ.bury, ids
        yield MQ.delete_ended, {"ids": list(ended)}
        yield from families.after_ended({i: str(e["ended_as"]) for i, e in ended.items()})
    if retried:
        yield MQ.retry_tasks, {"ids": list(retried), "batch": _keyed(retried), "at": at}
    return finished


def heartbeat(
    fences: Sequence[Fence], lease_s: float, progress: Mapping[int, str] | None
) -> Plan[Held]:
    """Extend the leases still held (rows another transaction holds are busy, not lost)."""
    epochs = dict(sorted(fences))
    if not epochs:
        return Held()
    reported = progress or {}
    batch = _keyed({i: {"epoch": e, "progress": reported.get(i)} for i, e in epochs.items()})
    ids = list(epochs)
    locked = yield MQ.lock_beating, {"ids": ids, "batch": batch}
    held = {int(r[0]): bool(r[1]) for r in locked.rows}
    if held:
        yield MQ.beat, {"ids": list(held), "batch": batch, "lease_us": micros(lease_s)}
    running = yield MQ.still_running, {"ids": ids, "batch": batch}
    return Held(
        held, (i for i, cancel in held.items() if cancel), (int(r[0]) for r in running.rows)
    )


def save_checkpoint(fence: Fence, state_json: str) -> Plan[bool]:
    params = {"id": fence[0], "epoch": fence[1], "checkpoint": state_json}
    answer = yield MQ.save_checkpoint, params
    return answer.count > 0
