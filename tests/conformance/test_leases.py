"""Leases: ``heartbeat`` and ``save_checkpoint``, fenced, on every implementation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ledgerq.ledger.model import Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import (
    Enqueue,
    claim_one,
    when,
)

# -- heartbeat and save_checkpoint ------------------------------------------------------


@ON_MARIADB
async def test_heartbeat_extends_only_the_leases_still_held(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    held, lost, pending = enqueue("conf.hb", "conf.hb", "conf.hb")
    held_task = await claim_one(ledger, held)
    lost_task = await claim_one(ledger, lost)
    await ledger.finish([Outcome.failed(lost_task.fence, "rescued", delay=0)])  # fence moved on
    await ledger.backdate([held], "lease_until", -5)  # simulate a lease about to run out (5 s left)

    extended = await ledger.heartbeat(
        [held_task.fence, lost_task.fence, (pending, 0), (10**12, 0)], 600.0
    )

    assert extended == frozenset({held}) and extended.cancelling == frozenset()
    lease = when((await ledger.show(held))["lease_until"])
    assert lease > datetime.now(UTC) + timedelta(seconds=500)
    # a fence from before a re-claim does not hold either, though the row is running
    again = await claim_one(ledger, lost, lost_task.epoch)
    assert await ledger.heartbeat([lost_task.fence], 600.0) == frozenset()
    assert await ledger.heartbeat([again.fence], 600.0) == frozenset({lost})
    assert await ledger.heartbeat([], 600.0) == frozenset()


@ON_MARIADB
async def test_save_checkpoint_is_fenced_and_the_next_attempt_sees_it(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.cp")
    task = await claim_one(ledger, task_id)

    assert await ledger.save_checkpoint(task.fence, {"step": 2, "of": [1, 2, 3]}) is True
    assert await ledger.save_checkpoint((task_id, 0), {"step": "stale"}) is False

    assert (await ledger.show(task_id))["checkpoint"] == {"step": 2, "of": [1, 2, 3]}
    await ledger.finish([Outcome.failed(task.fence, "crash", delay=0)])
    assert await ledger.save_checkpoint(task.fence, {"step": "not running"}) is False
    again = await claim_one(ledger, task_id, task.epoch)
    assert again.checkpoint == {"step": 2, "of": [1, 2, 3]}
