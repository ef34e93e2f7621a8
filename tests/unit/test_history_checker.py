"""The history checker (tests/faults/history.py) can fail: each rule is fed a
hand-made history that breaks it, and must name the violation; a clean history
(a task retried after its worker was killed, then a keyed line run in order)
passes every rule."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from tests.faults.history import Attempt, Effect, TaskHistory, check_histories

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def good(task_id: int = 1, start: float = 0.0, key: str | None = None) -> TaskHistory:
    """Killed at its first attempt (the lease expired, retried), succeeded at its
    second: epoch 4 (published 1, claimed 2, re-published 3, claimed 4)."""
    return TaskHistory(
        id=task_id,
        status="succeeded",
        epoch=4,
        attempts=2,
        ordering_key=key,
        log=(
            Attempt(1, at(start), at(start + 2), "retry"),
            Attempt(2, at(start + 3), at(start + 4), "succeeded"),
        ),
        effects=(Effect(task_id, 2, 4, at(start + 3.1), at(start + 3.9)),),
    )


def violations(*tasks: TaskHistory) -> dict[str, list[str]]:
    verdict = check_histories(tasks)
    return {rule: found for rule, found in verdict.violations.items() if found}


def test_a_clean_history_passes_every_rule() -> None:
    line = [good(1, 0, "k"), good(2, 5, "k"), good(3, 10, "k"), good(4, 1)]
    verdict = check_histories(line)
    assert verdict.ok, verdict.as_dict()
    assert (verdict.tasks, verdict.attempts, verdict.keyed) == (4, 8, 3)


def test_overlapping_attempts_are_reported() -> None:
    task = good()
    # the retry was claimed while the first attempt still ran
    log = (replace(task.log[0], ended=at(3.5)), task.log[1])
    assert set(violations(replace(task, log=log))) == {"overlap"}


def test_a_committed_run_outside_its_attempt_is_reported() -> None:
    task = good()
    # the committed run began during the first attempt (a timed-out thread's code)
    effects = (replace(task.effects[0], began=at(1.0)),)
    found = violations(replace(task, effects=effects))
    assert set(found) == {"overlap"}
    assert len(found["overlap"]) == 2  # outside the last attempt, before the earlier one ended


def test_a_terminal_write_under_another_epoch_is_reported() -> None:
    task = good()
    stale = (replace(task.effects[0], epoch=2),)  # the first attempt's fence
    found = violations(replace(task, effects=stale))
    assert set(found) == {"epoch"}
    assert "epoch 4, its run's epoch 2" in found["epoch"][0]


def test_a_terminal_write_by_another_attempt_is_reported() -> None:
    task = good()
    assert set(violations(replace(task, attempts=3))) == {"epoch"}


def test_two_terminal_statuses_are_reported() -> None:
    task = good()
    log = (replace(task.log[0], outcome="dead"), task.log[1])
    assert set(violations(replace(task, log=log))) == {"terminal"}


def test_a_terminal_status_that_is_not_the_rows_is_reported() -> None:
    task = good()
    assert set(violations(replace(task, status="dead"))) == {"terminal"}  # and it left an effect


def test_a_live_row_is_reported() -> None:
    task = replace(good(), status="running")
    assert "terminal" in violations(task)


def test_two_committed_runs_are_reported() -> None:
    task = good()
    twice = (*task.effects, replace(task.effects[0], row=99))
    assert "terminal" in violations(replace(task, effects=twice))


def test_a_keyed_task_started_before_its_predecessor_ended_is_reported() -> None:
    first, second = good(1, 0, "k"), good(2, 3.5, "k")  # second begins at 3.5 < 4
    found = violations(first, second)
    assert set(found) == {"order"}
    assert "task 2 began before task 1" in found["order"][0]


def test_keyed_effects_committed_out_of_order_are_reported() -> None:
    first, second = good(5, 0, "k"), good(2, 5, "k")  # first committed, effect row 5 > 2
    found = violations(first, second)
    assert set(found) == {"order"}


def test_tasks_of_different_keys_may_interleave() -> None:
    assert not violations(good(1, 0, "a"), good(2, 1, "b"), good(3, 1))


def test_a_key_is_ordered_per_ledger_shard() -> None:
    """Shard 1's effect table numbers its rows on its own, and its task of the key
    may run while shard 0's does."""
    on_shard_1 = good(1 << 48 | 2, 3.5, "k")
    on_shard_1 = replace(on_shard_1, effects=(replace(on_shard_1.effects[0], row=1),))
    assert not violations(good(5, 0, "k"), on_shard_1)
