"""Releasing an ordering key held by dead tasks: ``ledgerq tasks release-key KEY``.

A dead task of a kind registered with ``ordering="block"`` holds the later
tasks of its ordering key (view ``ledgerq_ready``) until an operator acts. To
run it again, retry it (it still goes first). To give up on it, release the
key: each death that holds it is recorded as released in
``ledgerq_key_releases`` (migration 0015), fenced by the dead row's epoch, and
the key's next task becomes due. The dead task stays in history as it ended.
A released task that is retried later and dies again holds its key again (a
new epoch), and so does any later death of the key.

Written once, without I/O, as a plan of statements (like :mod:`.actions`):
:meth:`~ledgerq.ledger.pg.operations.PgOperations.release_key` runs it in one
short transaction of its own, :func:`ledgerq.ledger.operations.release_key` in
the caller's. The deaths found, the compare-and-set and the audit record (action
``release-key``, one line per death) commit together. A key that nothing holds
any more is not an error and writes nothing (like a pause already taken); a key
no live or dead task has is :class:`~ledgerq.core.errors.TaskNotFoundError`.
"""

from __future__ import annotations

import json
from collections.abc import Generator
from dataclasses import dataclass, field
from typing import Any

from ledgerq.core.errors import InvalidFilterError, InvalidTaskError, TaskNotFoundError
from ledgerq.ledger.actions import COMMIT, MOVED_ON, Rows, Step
from ledgerq.ledger.sql import OQ
from ledgerq.ledger.validation import check_key

ACTION = "release-key"


@dataclass
class KeyRelease:
    """What releasing ``key`` did (in a dry run: would do). ``released``: the ids of
    the dead tasks that held it and now do not; ``moved_on``: those that were retried
    meanwhile, so were not released; ``waiting``: the key's pending tasks (the next
    of them becomes due once nothing holds the key); ``live``: all its live tasks."""

    key: str
    dry_run: bool = False
    released: list[int] = field(default_factory=list)
    moved_on: int = 0
    waiting: int = 0
    live: int = 0
    audit_id: int | None = None

    @property
    def held(self) -> bool:
        """Whether some death held the key when the release looked."""
        return bool(self.released) or self.moved_on > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "held": self.held,
            "released": self.released,
            "moved_on": self.moved_on,
            "waiting": self.waiting,
            "live": self.live,
            "dry_run": self.dry_run,
            "audit_id": self.audit_id,
        }

    def line(self) -> str:
        """The one line ``ledgerq tasks release-key`` prints."""
        if not self.held:
            return (
                f"ordering key {self.key!r} is not held (no unreleased dead task of a blocking "
                f"kind); nothing to release; {self.waiting} pending"
            )
        verb = "would release" if self.dry_run else "released"
        ids = ", ".join(map(str, self.released)) or "none"
        text = f"release-key {self.key!r}: {verb} {len(self.released)} dead (ids {ids})"
        if self.moved_on:
            text += f", {self.moved_on} {MOVED_ON}"
        text += f"; {self.waiting} pending behind it may run"
        if self.dry_run:
            return text + " (dry run)"
        return text + f"; audit record {self.audit_id}"


def release_plan(
    key: str, *, actor: str, reason: str | None = None, dry_run: bool = False
) -> Generator[Step | None, Rows, KeyRelease]:
    """The statements that release ``key``; returns the :class:`KeyRelease`."""
    try:
        checked = check_key(key, "ordering key")
    except InvalidTaskError as exc:
        raise InvalidFilterError(str(exc)) from None
    if checked is None:
        raise InvalidFilterError("release-key needs an ordering key")
    if not actor:
        raise InvalidFilterError("an action needs an actor (who is acting)")
    holders = [(int(r[0]), int(r[1])) for r in (yield OQ.key_holders, {"key": checked})]
    [(live, waiting, has_dead)] = yield OQ.key_tasks, {"key": checked}
    report = KeyRelease(checked, dry_run, waiting=int(waiting), live=int(live))
    if not holders and not live and not has_dead:
        raise TaskNotFoundError(f"no live or dead task has ordering key {checked!r}")
    if dry_run or not holders:
        report.released = [task_id for task_id, _ in holders]
        return report
    answer = yield (
        OQ.insert_audit,
        {
            "actor": actor,
            "action": ACTION,
            "selection": json.dumps({"ordering_key": checked}),
            "options": json.dumps({}),
            "reason": reason,
        },
    )
    report.audit_id = int(answer[0][0])
    won = {
        int(r[0])
        for r in (
            yield (
                OQ.release_key,
                {
                    "key": checked,
                    "ids": [task_id for task_id, _ in holders],
                    "epochs": [epoch for _, epoch in holders],
                    "audit_id": report.audit_id,
                },
            )
        )
    }
    report.released = sorted(won)
    report.moved_on = len(holders) - len(won)
    outcomes = {task_id: "changed" if task_id in won else MOVED_ON for task_id, _ in holders}
    yield (
        OQ.record_audit_batch,
        {
            "audit_id": report.audit_id,
            "matched": len(outcomes),
            "changed": len(won),
            "skipped": report.moved_on,
            "task_ids": list(outcomes),
            "outcomes": list(outcomes.values()),
        },
    )
    yield COMMIT
    return report
