"""The history checker: per-task properties of a run, beside the total-queue check.

:func:`tests.faults.cluster.check` counts (every committed task ends once, none is
lost, no duplicate effect). This module reads each task's recorded history and
checks how it got there, after Jepsen's per-operation histories:

- ``overlap``: no two attempts of a task overlap in time. A task's attempts are its
  ``attempt_log`` records (each claim's ``started_at`` to the fenced finish's
  ``ended_at``, appended by the finish statement, the reconciler's expiry
  included), in the order they were appended; each must end no later than the
  next begins. The committed handler run (its ``fault_effects`` row: ``began``,
  the handler's own clock at its start, and ``at``, the database's clock at its
  write) must lie inside the attempt that ended the task, after every earlier one.
- ``epoch``: every terminal write carries the epoch of the attempt that made it.
  The handler records the epoch and the attempt number it ran under
  (``ctx.task.epoch``) in the same transaction as the fenced success; the history
  row must carry that epoch and that attempt, and so must the log's last record.
- ``terminal``: at most one terminal status. The task is in history with one of
  ``succeeded``, ``dead``, ``cancelled``; its log has at most one terminal record,
  the last one, matching the status; a task that did not succeed left no effect.
- ``order``: per-key commit order. Tasks that share an ``ordering_key``, in the
  order the test committed them, ran one at a time: each one's first attempt
  began after the previous one's last attempt ended, and their effects were
  committed in that order. On a ledger split across databases a key is ordered
  per database (as documented), so a line is the key's tasks on one shard.

The timestamps compared are all this machine's wall clock (PostgreSQL's
``clock_timestamp()`` and the worker's ``time.time()``): one clock, so a strict
comparison holds. The checks are pure functions of :class:`TaskHistory` records
(tests/unit/test_history_checker.py feeds each one a broken history);
:func:`load_histories` builds them from a run, task rows through the storage seam,
effects from the test app's own table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from ledgerq.core.config import Settings
from ledgerq.ledger.split.ids import shard_of_id
from ledgerq.ledger.states import TERMINAL
from tests.faults.cluster import ClusterLedger
from tests.harness import db

#: The attempt-log outcomes that end a task.
TERMINAL_OUTCOMES = frozenset(TERMINAL)


@dataclass(frozen=True)
class Attempt:
    """One ended attempt, as the ledger logged it."""

    attempt: int
    started: datetime
    ended: datetime
    outcome: str


@dataclass(frozen=True)
class Effect:
    """One committed handler run, as the test app recorded it."""

    row: int  # fault_effects.id: commit order within one database
    attempt: int
    epoch: int | None
    began: datetime | None
    at: datetime


@dataclass(frozen=True)
class TaskHistory:
    id: int
    status: str
    epoch: int
    attempts: int
    ordering_key: str | None = None
    log: tuple[Attempt, ...] = ()
    effects: tuple[Effect, ...] = ()


@dataclass
class HistoryVerdict:
    tasks: int = 0
    attempts: int = 0
    keyed: int = 0
    violations: dict[str, list[str]] = field(default_factory=lambda: defaultdict(list))

    @property
    def ok(self) -> bool:
        return not any(self.violations.values())

    def as_dict(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "attempts": self.attempts,
            "keyed": self.keyed,
            "violations": {rule: len(found) for rule, found in self.violations.items()},
            "examples": [v for found in self.violations.values() for v in found[:3]],
            "ok": self.ok,
        }


def check_overlap(task: TaskHistory) -> list[str]:
    found = []
    for a, b in pairwise(task.log):
        if a.ended > b.started:
            found.append(
                f"task {task.id}: attempt {a.attempt} ended {a.ended}, the next began {b.started}"
            )
    for a in task.log:
        if a.started > a.ended:
            found.append(f"task {task.id}: attempt {a.attempt} ended before it began")
    if task.effects and task.log:
        last, earlier = task.log[-1], task.log[:-1]
        for e in task.effects:
            began = e.began or e.at
            if not (last.started <= began <= e.at <= last.ended):
                found.append(
                    f"task {task.id}: committed run {began}..{e.at} outside its attempt "
                    f"{last.started}..{last.ended}"
                )
            if earlier and began < earlier[-1].ended:
                found.append(
                    f"task {task.id}: committed run began in attempt {earlier[-1].attempt}"
                )
    return found


def check_epoch(task: TaskHistory) -> list[str]:
    found = []
    for e in task.effects:
        if e.epoch is not None and e.epoch != task.epoch:
            found.append(
                f"task {task.id}: terminal write at epoch {task.epoch}, its run's epoch {e.epoch}"
            )
        if e.attempt != task.attempts:
            found.append(
                f"task {task.id}: terminal write for attempt {task.attempts}, its run's {e.attempt}"
            )
    if task.log and task.status in TERMINAL and task.log[-1].attempt != task.attempts:
        found.append(
            f"task {task.id}: last logged attempt {task.log[-1].attempt}, the row's {task.attempts}"
        )
    return found


def check_terminal(task: TaskHistory) -> list[str]:
    found = []
    if task.status not in TERMINAL:
        found.append(f"task {task.id}: status {task.status}, not terminal")
    ends = [a for a in task.log if a.outcome in TERMINAL_OUTCOMES]
    if len(ends) > 1:
        found.append(f"task {task.id}: {len(ends)} terminal records: {[a.outcome for a in ends]}")
    if ends and (ends[-1] is not task.log[-1] or ends[-1].outcome != task.status):
        found.append(
            f"task {task.id}: last terminal record {ends[-1].outcome}, status {task.status}"
        )
    if task.status != "succeeded" and task.effects:
        found.append(f"task {task.id}: {task.status} but {len(task.effects)} committed effects")
    if len(task.effects) > 1:
        found.append(f"task {task.id}: {len(task.effects)} committed effects")
    return found


def check_order(tasks: Sequence[TaskHistory]) -> list[str]:
    """``tasks`` in commit order (the test committed them one after another). A key
    is ordered within one ledger shard (docs/guarantees.md): lines are per shard."""
    by_key: dict[tuple[int, str], list[TaskHistory]] = defaultdict(list)
    for task in tasks:
        if task.ordering_key is not None:
            by_key[(shard_of_id(task.id), task.ordering_key)].append(task)
    found = []
    for (_, key), line in by_key.items():
        for a, b in pairwise(line):
            if a.log and b.log and b.log[0].started < a.log[-1].ended:
                found.append(
                    f"key {key}: task {b.id} began before task {a.id} (committed first) ended"
                )
            if a.effects and b.effects and b.effects[0].row < a.effects[-1].row:
                found.append(f"key {key}: task {b.id}'s effect committed before task {a.id}'s")
    return found


RULES = {"overlap": check_overlap, "epoch": check_epoch, "terminal": check_terminal}


def check_histories(tasks: Sequence[TaskHistory]) -> HistoryVerdict:
    """Every rule over every task (``tasks`` in commit order, for ``order``)."""
    verdict = HistoryVerdict(tasks=len(tasks))
    for task in tasks:
        verdict.attempts += len(task.log)
        verdict.keyed += task.ordering_key is not None
        for rule, check in RULES.items():
            verdict.violations[rule] += check(task)
    verdict.violations["order"] += check_order(tasks)
    return verdict


def _when(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def attempts_of(log: Iterable[dict[str, Any]] | None) -> tuple[Attempt, ...]:
    return tuple(
        Attempt(
            int(r["attempt"]), _when(r["started_at"]), _when(r["ended_at"]), str(r.get("outcome"))
        )
        for r in log or ()
    )


async def load_histories(
    settings: Settings, ledger: ClusterLedger, ids: Sequence[int]
) -> list[TaskHistory]:
    """Each id's history, in the order given: its row (live or history) through the
    seam's ``show``, its committed runs from every ledger shard's ``fault_effects``."""
    effects: dict[int, list[Effect]] = defaultdict(list)
    for shard in settings.ledger_shards():
        with db(shard) as conn:
            for task_id, row, attempt, epoch, began, at in conn.execute(
                "SELECT task_id, id, attempt, epoch, began, at FROM fault_effects "
                "WHERE task_id = ANY(%s) ORDER BY id",
                (list(ids),),
            ):
                effects[int(task_id)].append(Effect(int(row), int(attempt), epoch, began, at))
    histories = []
    for task_id in ids:
        row = await ledger.show(task_id)
        histories.append(
            TaskHistory(
                id=task_id,
                status=str(row["status"]),
                epoch=int(row["epoch"]),
                attempts=int(row["attempts"]),
                ordering_key=row.get("ordering_key"),
                log=attempts_of(row.get("attempt_log")),
                effects=tuple(effects.get(task_id, ())),
            )
        )
    return histories
