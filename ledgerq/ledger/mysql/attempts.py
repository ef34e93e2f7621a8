"""The end of an attempt on the MySQL ledger, and what a running attempt writes,
as plans (:mod:`.plans`): :func:`finish` (one verdict per row, fenced),
:func:`heartbeat` (the leases still held) and :func:`save_checkpoint`.

Contract: every write is fenced on (id, epoch, status ``running``): a row moved
on (reclaimed, cancelled, rescued) is left alone and reported as not held.
``finish`` locks its rows in id order under their fences and reads the
database's clock once (the attempts' end) in that locking read, then buries
what ends (history, the families and dependants judged:
:func:`.families.after_ended`) and sends the rest back to pending (a retry of a
sticky kind held for its worker: :mod:`.sticky`), before the caller's commit.

Races: rows always locked in id order, so two finishes cannot deadlock each
other (an InnoDB deadlock, 1213, rolls back the whole transaction: transient,
retried by the worker's finisher). ``heartbeat`` skips rows another
transaction holds (busy, not lost).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ledgerq.ledger.model import Fence, Finished, Held, Outcome
from ledgerq.ledger.mysql import families
from ledgerq.ledger.mysql.base import micros
from ledgerq.ledger.mysql.plans import Plan, keyed
from ledgerq.ledger.mysql.queries import MQ


def finish(outcomes: Sequence[Outcome]) -> Plan[list[Finished]]:
    """How attempts ended, one verdict per row, fenced: lock the rows still running
    under their fences and decide where each goes (lock_finishing, which also reads
    the database's clock: the attempts' end), then bury what ends (and judge the
    tasks waiting for them and their families: :func:`.families.after_ended`) and send the rest
    back to pending."""
    verdicts = {o.id: o for o in sorted(outcomes, key=lambda o: o.id)}
    if not verdicts:
        return []
    batch = keyed({i: {"epoch": o.epoch, "verdict": o.verdict} for i, o in verdicts.items()})
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
        ids = {"ids": list(ended), "batch": keyed(ended), "at": at}
        yield MQ.bury, ids
        yield MQ.delete_ended, {"ids": list(ended)}
        yield from families.after_ended({i: str(e["ended_as"]) for i, e in ended.items()})
    if retried:
        yield MQ.retry_tasks, {"ids": list(retried), "batch": keyed(retried), "at": at}
    return finished


def heartbeat(
    fences: Sequence[Fence], lease_s: float, progress: Mapping[int, str] | None
) -> Plan[Held]:
    """Extend the leases still held (rows another transaction holds are busy, not lost)."""
    epochs = dict(sorted(fences))
    if not epochs:
        return Held()
    reported = progress or {}
    batch = keyed({i: {"epoch": e, "progress": reported.get(i)} for i, e in epochs.items()})
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
