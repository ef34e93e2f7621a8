"""The producer's insert on the MySQL ledger, as plans (:mod:`.plans`): one task
(:func:`enqueue_single`, :func:`enqueue_one`) or many (:func:`enqueue_many`,
batched where the server gives the ids back: :mod:`.batch`), on the caller's
connection (its transaction: :mod:`.tx`) or the ledger's own (:mod:`.services`).

Contract: every spec is validated, and the tasks named in ``after`` locked
(:func:`.dependencies.check`), before the first insert; the ids come back in
input order, a duplicate's (``unique``, ``once``) as the id of the task holding
the key, nothing inserted for it. Plain inserts, the duplicate's error caught
(MySQL rolls back the failed statement alone): a producer needs no UPDATE
right on what a task is.

Races: a producer whose insert meets another's uncommitted key waits on the
unique index until that one commits (its insert then fails: it meets the task)
or rolls back (its insert goes in). A ``unique`` task that met a live holder
reads it with a lock; if the holder ended between the two (history keeps no
de-duplication key), the insert is tried again, at most a few times.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.after import After
from ledgerq.ledger.mysql import batch, dependencies, families
from ledgerq.ledger.mysql.base import error_number, micros
from ledgerq.ledger.mysql.engines import utc
from ledgerq.ledger.mysql.plans import Plan
from ledgerq.ledger.mysql.queries import MQ
from ledgerq.ledger.specs import TaskSpec

#: ER_DUP_ENTRY: an insert met a unique key's holder.
DUPLICATE_KEY = 1062
#: How often an insert that met a live duplicate is tried again when the holder
#: ended before it could be read (it can end only once per try).
_KEY_TRIES = 5


def duplicate_key(exc: BaseException) -> bool:
    """Whether ``exc`` (SQLAlchemy's, or a raw driver's) is MySQL's duplicate key."""
    return error_number(getattr(exc, "orig", None) or exc) == DUPLICATE_KEY


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
