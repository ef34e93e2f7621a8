"""Dependencies between tasks (``enqueue(..., after=[id, ...])``): the options' rules
and the typed errors (migration 0020 holds the ledger's side).

A task enqueued with ``after`` waits (status ``waiting``: neither due nor
published) until every task it names has ended. All succeeded: it becomes
``pending``. One ended ``dead`` or ``cancelled``: it ends ``cancelled``, its
``last_error`` naming that dependency, and never runs, unless
``after_policy="always"``, which runs it whatever they did.

The producer checks the named ids before it writes anything: an id that is on
another ledger shard (:class:`DependencyShardError`) or in neither table
(:class:`UnknownDependencyError`) is refused with nothing written. A task naming
itself is refused by the ledger (:class:`SelfDependencyError`, SQLSTATE ``LQD01``),
which makes the statement fail: roll the transaction back. ``after`` with
``unique``/``once`` is refused too: a duplicate returns the id of a task that
already exists, whose dependencies are not the caller's.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ledgerq.core.errors import InvalidTaskError

#: The values of ``after_policy``.
POLICIES = ("succeeded", "always")
#: The most dependencies one task may name.
MAX_AFTER = 10_000


class DependencyError(InvalidTaskError):
    """An ``after`` list the ledger refused; nothing was written."""


class UnknownDependencyError(DependencyError):
    """``after`` names a task that is neither live nor in history."""


class DependencyShardError(DependencyError):
    """``after`` names a task on another ledger shard: a dependency must live in the
    database the dependent is enqueued in (its end releases the dependent in the same
    transaction)."""


class SelfDependencyError(DependencyError):
    """A task names itself in ``after``."""


@dataclass(frozen=True)
class After:
    """A task's validated dependencies: the ids (unique, in the caller's order) and
    whether it runs whatever they did (``after_policy="always"``)."""

    ids: tuple[int, ...]
    always: bool


def check_after(after: object, policy: object, *, deduplicated: bool) -> After | None:
    """The validated ``after`` and ``after_policy`` options, or None without ``after``;
    InvalidTaskError naming the option otherwise."""
    if policy not in POLICIES:
        raise InvalidTaskError(f"after_policy must be one of {', '.join(POLICIES)}, got {policy!r}")
    if after is None:
        return None
    if isinstance(after, (str, bytes, int)) or not isinstance(after, Iterable):
        raise InvalidTaskError(f"after must be a list of task ids, got {type(after).__name__}")
    ids: list[int] = []
    for item in after:
        if isinstance(item, bool) or not isinstance(item, int) or item < 1:
            raise InvalidTaskError(f"after must hold task ids (positive integers), got {item!r}")
        if item not in ids:
            ids.append(item)
    if len(ids) > MAX_AFTER:
        raise InvalidTaskError(f"after may name at most {MAX_AFTER} tasks, got {len(ids)}")
    if not ids:
        return None
    if deduplicated:
        raise InvalidTaskError(
            "after cannot be combined with unique or once: a duplicate is a task that "
            "exists already, with its own dependencies"
        )
    return After(tuple(ids), policy == "always")


def refusal(problems: Iterable[tuple[int, str]]) -> DependencyError | None:
    """The error for ``ledgerq_after_check``'s rows ((id, 'unknown' | 'shard')), if any."""
    rows = sorted(problems)
    shard = [i for i, problem in rows if problem == "shard"]
    if shard:
        return DependencyShardError(
            f"after names task {shard[0]}, which is on another ledger shard: a task may "
            "depend only on tasks of its own database"
        )
    if rows:
        return UnknownDependencyError(
            f"after names task {rows[0][0]}, which does not exist (live or in history)"
        )
    return None


def edges(task_ids: Iterable[int], afters: Iterable[After | None]) -> dict[str, list[object]]:
    """``after_add``'s parallel arrays for the tasks just inserted."""
    tasks: list[object] = []
    deps: list[object] = []
    always: list[object] = []
    for task_id, after in zip(task_ids, afters, strict=True):
        if after is None:
            continue
        for dep in after.ids:
            tasks.append(task_id)
            deps.append(dep)
            always.append(after.always)
    return {"tasks": tasks, "deps": deps, "always": always}


def graph(rows: Iterable[Any]) -> dict[str, list[dict[str, Any]]]:
    """``task_graph``'s rows (side, id, always, status, kind) as ``show`` gives them:
    ``dependencies`` and ``dependents``, each a list of {id, kind, status, always}
    (status None: the task was purged from history)."""
    found: dict[str, list[dict[str, Any]]] = {"dependencies": [], "dependents": []}
    for side, task_id, always, status, kind in rows:
        key = "dependencies" if side == "dependency" else "dependents"
        found[key].append(
            {"id": int(task_id), "kind": kind, "status": status, "always": bool(always)}
        )
    return found


def graph_text(tasks: Iterable[dict[str, Any]]) -> str:
    """A ``graph`` list as one line: ``12 succeeded, 13 running`` (``purged`` for a
    task no longer in the ledger)."""
    return ", ".join(f"{t['id']} {t['status'] or 'purged'}" for t in tasks)
