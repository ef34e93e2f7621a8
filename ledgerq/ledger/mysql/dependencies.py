"""Dependencies between tasks on the MySQL / MariaDB ledger (``enqueue(...,
after=[id, ...])``, migration m0007), with PostgreSQL's semantics
(:mod:`ledgerq.ledger.after`, migrations 0020 and 0022): a task enqueued with
``after`` is ``waiting`` until every task it names has ended; all succeeded (or
``after_policy="always"``): ``pending``; one ended ``dead`` or ``cancelled``: it
ends ``cancelled``, ``last_error`` naming the first such dependency by id, and
its own dependents are judged in turn, down the chain.

PostgreSQL releases from a trigger on history. MySQL's triggers cannot change
``ledgerq_tasks`` from a statement that reads it (every bury does), so here the
plans that end tasks call :func:`released_by` themselves in the same
transaction (through :func:`.families.after_ended`): the worker's finish and the
reconciler's (:func:`.attempts.finish`), the operator's cancel
(:mod:`.operations_plans`), and this module's own cancels.

The judge reads no dependency's row: each edge carries its dependency's end as
the dependent sees it (``dependency_ended``), written only by a transaction that
holds the dependent's row lock. Locks, in the order each side takes them:

- The producer (:func:`check`, :func:`add`): a plain read says where each named
  task is; then ``LOCK IN SHARE MODE`` on the live ones (by primary key, rows
  that exist: record locks, no gap) and on the ended ones' history rows. A live
  dependency cannot end before the producer commits: its finish locks its row
  FOR UPDATE and waits. A row the plain read saw live and the lock did not find
  ended meanwhile: it is read locked in history then. Then the producer inserts
  its tasks and their edges, and the procedure ``ledgerq_after_add`` (m0007, run
  as the migrator) stamps the edges from history, sets the tasks waiting and
  judges at once those whose dependencies had all ended.
- An ender (:func:`released_by`, after its bury and delete): a plain read of the
  edges near the ended ids (their dependents and the dependents' edges); the
  dependents still waiting, ``FOR UPDATE`` in id order; for each, its edges to
  the ended ids stamped by the primary key's points (``FORCE INDEX``: record
  locks only), then all its edges read ``LOCK IN SHARE MODE`` the same way (the
  latest committed stamps, whatever the snapshot); then release or cancel.
  Last, the ended tasks' own edges get their ``ended_at``.

The insert/finish race: the producer's share lock and the finish's FOR UPDATE
on the dependency serialise them. Producer first: the finish waits for its
commit, and its plain read of the edges (READ COMMITTED in ledgerq's own
transactions: a snapshot per statement) is after it and sees the new edge. Finish
first: the producer's lock waits for that commit, then finds the dependency in
history, and the edge is stamped with its status. Two dependencies ending at once
(write skew): both stamp under the dependent's row lock, so the second waits,
then reads the first's stamp committed. No wake-up is missed, except as on
PostgreSQL by a finish in a caller's transaction (``succeed`` inside a handler's
own transaction) whose snapshot predates the dependent's commit: its plain read
misses the edge, and the reconciler's :func:`release_stuck` makes the release.

Deadlocks: every row lock is taken by primary key on rows a plain read found,
in id order within a statement. ledgerq's own transactions run at READ
COMMITTED, which takes no gap lock. In an application's REPEATABLE READ
transaction (``succeed`` in a handler's own, a producer's) point reads of rows
that exist lock no gap either (checked on MariaDB 10.11: a producer's edge
insert is not held up by them; along the depends_on index an update was), and
the ranges locked are: the ``ended_at`` stamp's, the ender's last statement,
after every wait; and the gap where a named or dependent row was looked for and
had gone since the plain read (or never existed: an unknown id, refused), which
holds up inserts there, new tasks' included, until that transaction ends. A
producer waits only on a dependency's row, which an ender holds only while
ending it, and an ender waits on a dependent's row, which a producer holds
(shared) only while naming it. As on PostgreSQL, a
transaction that enqueues after a task, then in a later statement after that
task's own dependency, while the dependency ends, can deadlock with that finish;
InnoDB rolls one back (error 1213: the finish is written again, the producer's
transaction is the application's to retry).

Differences from PostgreSQL: an operator's retry of a dependency does not make
its waiting dependents wait for it again (their edges keep its first end).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from sqlalchemy import TextClause

from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.after import After, SelfDependencyError, refusal
from ledgerq.ledger.mysql.answer import Answer
from ledgerq.ledger.mysql.base import decoded
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.split.ids import shard_of_id
from ledgerq.ledger.sql import load_in_lists, read_library

R = TypeVar("R")
Plan = Generator[tuple[TextClause, Mapping[str, Any]], Answer, R]
#: (dependency, always, its end as stamped: None while live)
Edge = tuple[int, bool, str | None]
#: How often the producer looks again when a dependency ended between its look
#: and its lock (it can end only once per look).
_TRIES = 5


@dataclass(frozen=True)
class DependencyQueries:
    """``ledger/mysql/dependencies.sql``."""

    where_named: TextClause
    home_shard: TextClause
    lock_named_live: TextClause
    lock_named_ended: TextClause
    add_edges: TextClause
    after_add: TextClause
    edges_near: TextClause
    lock_waiting: TextClause
    stamp_dependency: TextClause
    judged_edges: TextClause
    release_waiting: TextClause
    bury_waiting: TextClause
    delete_waiting: TextClause
    stamp_ended: TextClause
    stuck: TextClause
    edges_of: TextClause
    stamp_from_history: TextClause
    dependency_results: TextClause
    task_graph: TextClause
    prune_dependencies: TextClause
    truncate_dependencies: TextClause


#: The ends' shared reads (ends_fragments.sql), beside the MySQL ledger's fragments.
ENDS = {**LIBRARY, **read_library("ledgerq.ledger.mysql", "ends_fragments.sql")}
DQ: DependencyQueries = load_in_lists(
    DependencyQueries, "ledgerq.ledger.mysql", "dependencies.sql", ENDS
)


# -- the producer -------------------------------------------------------------------


def check(afters: Sequence[After | None]) -> Plan[None]:
    """Lock what ``afters`` name (module docstring), or refuse an id on another
    ledger shard or in neither table, before anything is written."""
    ids = sorted({dep for after in afters if after is not None for dep in after.ids})
    if not ids:
        return
    seen = yield DQ.where_named, {"ids": ids}
    ended = {int(r[0]) for r in seen.rows if r[1] != "live"}
    live = [i for i in ids if i not in ended]  # and the unknown: a stale snapshot's
    known: dict[int, str | None] = {}
    for _ in range(_TRIES):
        if live:
            locked = yield DQ.lock_named_live, {"ids": live}
            known.update((int(r[0]), None) for r in locked.rows)
        # in history to the look, or ended since (or in neither table)
        looked = sorted(ended | {i for i in live if i not in known})
        if looked:
            locked = yield DQ.lock_named_ended, {"ids": looked}
            known.update((int(r[0]), str(r[1])) for r in locked.rows)
        missing = [i for i in ids if i not in known]
        if not missing:
            return
        unknown = [i for i in missing if i in live]  # neither table, both read locked
        shard = 0
        if unknown:  # another ledger shard's task, or none at all
            home = yield DQ.home_shard, {}
            shard = int(home.rows[0][0])
        error = refusal((i, "shard" if shard_of_id(i) != shard else "unknown") for i in unknown)
        if error is not None:
            raise error
        live, ended = missing, set()  # an operator's retry revived them meanwhile
    raise LedgerqError(f"the tasks {ids} named in after kept moving while they were read")


def add(new: Mapping[int, After]) -> Plan[None]:
    """The edges of the tasks just inserted (``new``: their ids and dependencies,
    which :func:`check` locked); then the migrator's procedure ``ledgerq_after_add``
    (migration m0007) stamps them, sets the tasks waiting and judges at once those
    whose dependencies have all ended: the producer changes no task itself."""
    if not new:
        return
    edges: list[dict[str, Any]] = []
    for task_id, after in sorted(new.items()):
        if task_id in after.ids:
            raise SelfDependencyError(f"task {task_id} names itself in after")
        edges += [
            {"task_id": task_id, "depends_on": dep, "always": int(after.always)}
            for dep in after.ids
        ]
    yield DQ.add_edges, {"edges": json.dumps(edges)}
    yield DQ.after_add, {"ids": json.dumps(sorted(new))}


# -- the judge ------------------------------------------------------------------------


def judge(edges: Mapping[int, Sequence[Edge]]) -> tuple[list[int], dict[int, str]]:
    """PostgreSQL's ``ledgerq_release`` rule for each locked waiting task's edges: the
    ones to release, and the ones to cancel with their ``last_error``; a task with a
    live dependency is in neither."""
    released: list[int] = []
    cancelled: dict[int, str] = {}
    for task_id, rows in sorted(edges.items()):
        if any(ended is None for _, _, ended in rows):
            continue
        failed = sorted((dep, ended) for dep, _, ended in rows if ended != "succeeded")
        if not failed or any(always for _, always, _ in rows):
            released.append(task_id)
        else:
            cancelled[task_id] = f"dependency {failed[0][0]} ended {failed[0][1]}"
    return released, cancelled


def _move(released: list[int], cancelled: Mapping[int, str]) -> Plan[None]:
    if released:
        yield DQ.release_waiting, {"ids": released}
    if cancelled:
        ids = sorted(cancelled)
        batch = json.dumps({str(i): {"error": cancelled[i]} for i in ids})
        yield DQ.bury_waiting, {"ids": ids, "batch": batch}
        yield DQ.delete_waiting, {"ids": ids}


def _locked_edges(task_id: int, deps: Iterable[int]) -> Plan[list[Edge]]:
    read = yield DQ.judged_edges, {"task_id": task_id, "deps": sorted(deps)}
    return [(int(dep), bool(always), ended) for dep, always, ended in read.rows]


# -- the enders -----------------------------------------------------------------------


def released_by(
    ended: Mapping[int, str], near: Sequence[Sequence[Any]] | None = None
) -> Plan[list[tuple[int, str]]]:
    """After the tasks ``ended`` (id: status in history) left the hot table, in the
    same transaction: judge their waiting dependents, then the dependents of those
    it cancels, and so on; stamp every ended task's own edges. ``near``: the first
    round's ``edges_near`` rows, if the caller read them already. Each task moved,
    with ``released`` or ``cancelled``."""
    moved: list[tuple[int, str]] = []
    stamped: list[int] = []
    step = dict(ended)
    while step:
        if near is None:
            near = (yield DQ.edges_near, {"ids": sorted(step)}).rows
        edges_of: dict[int, set[int]] = defaultdict(set)
        for _, task_id, dep in near:
            edges_of[int(task_id)].add(int(dep))
        near = None
        stamped.extend(i for i in step if i in edges_of)
        dependents = sorted(t for t, deps in edges_of.items() if any(d in step for d in deps))
        if not dependents:
            break
        locked = yield DQ.lock_waiting, {"ids": dependents}
        judged: dict[int, list[Edge]] = {}
        for task_id in sorted(int(r[0]) for r in locked.rows):
            mine = sorted(d for d in edges_of[task_id] if d in step)
            for status in sorted({step[d] for d in mine}):
                deps = [d for d in mine if step[d] == status]
                yield DQ.stamp_dependency, {"task_id": task_id, "status": status, "deps": deps}
            judged[task_id] = yield from _locked_edges(task_id, edges_of[task_id])
        released, cancelled = judge(judged)
        yield from _move(released, cancelled)
        moved += [(i, "released") for i in released] + [(i, "cancelled") for i in cancelled]
        step = dict.fromkeys(cancelled, "cancelled")
    if stamped:
        yield DQ.stamp_ended, {"ids": sorted(set(stamped))}
    return moved


def release_stuck(limit: int) -> Plan[list[tuple[int, str]]]:
    """The reconciler's safety net: up to ``limit`` waiting tasks none of whose
    dependencies is live, locked, their edges stamped from history, judged; what
    its cancels end in turn is the caller's (:func:`.families.release_stuck`).
    Idempotent."""
    found = yield DQ.stuck, {"limit": limit}
    ids = [int(r[0]) for r in found.rows]
    if not ids:
        return []
    locked = yield DQ.lock_waiting, {"ids": ids}
    held = sorted(int(r[0]) for r in locked.rows)
    if not held:
        return []
    read = yield DQ.edges_of, {"ids": held}
    edges_of: dict[int, list[int]] = defaultdict(list)
    for task_id, dep in read.rows:
        edges_of[int(task_id)].append(int(dep))
    judged: dict[int, list[Edge]] = {}
    for task_id in held:
        yield DQ.stamp_from_history, {"task_id": task_id}
        judged[task_id] = yield from _locked_edges(task_id, edges_of[task_id] or [0])
    released, cancelled = judge(judged)
    yield from _move(released, cancelled)
    return sorted([(i, "released") for i in released] + [(i, "cancelled") for i in cancelled])


# -- reads ----------------------------------------------------------------------------


def results(rows: Sequence[Sequence[Any]]) -> dict[int, Any]:
    """``dependency_results``' rows (id, status, result) as {id: decoded result}."""
    return {int(r[0]): decoded(r[2]) for r in rows}


def dependency_results(task_id: int) -> Plan[dict[int, Any]]:
    read = yield DQ.dependency_results, {"id": task_id}
    return results(read.rows)
