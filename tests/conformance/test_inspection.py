"""Inspection: ``stats``, ``show`` and what the testing protocol counts, on every
implementation."""

from __future__ import annotations

import pytest

from ledgerq import TaskSpec
from ledgerq.core.errors import LedgerqError, TaskNotFoundError
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.conftest import ON_MARIADB
from tests.conformance.support import (
    Enqueue,
    claim_one,
)

# -- inspection ---------------------------------------------------------------------------


@ON_MARIADB
async def test_stats_count_live_and_history_by_status_and_kind(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    assert await ledger.stats() == {"total": 0, "by_status": {}, "by_kind": {}}
    a, b, _ = enqueue("conf.x", "conf.x", "conf.y")
    task = await claim_one(ledger, a)
    await ledger.finish([Outcome.succeeded(task.fence)])
    await claim_one(ledger, b)

    assert await ledger.stats() == {
        "total": 3,
        "by_status": {"succeeded": 1, "running": 1, "pending": 1},
        "by_kind": {"conf.x": {"succeeded": 1, "running": 1}, "conf.y": {"pending": 1}},
    }
    assert await ledger.count_finished() == 1


@ON_MARIADB
async def test_show_returns_every_column_and_where_the_task_is(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue(TaskSpec("conf.show", {"a": [1, 2]}, business_key="b-7", priority=3))

    row = await ledger.show(task_id)

    assert row["location"] == "live"
    assert (row["id"], row["kind"], row["payload"], row["business_key"], row["priority"]) == (
        task_id,
        "conf.show",
        {"a": [1, 2]},
        "b-7",
        3,
    )
    assert {"status", "epoch", "attempts", "run_at", "created_at", "checkpoint"} <= set(row)
    assert isinstance(row["created_at"], str)  # timestamps as ISO text


@ON_MARIADB
async def test_show_of_an_unknown_id_raises_task_not_found(ledger: ShardLedger) -> None:
    with pytest.raises(TaskNotFoundError) as caught:
        await ledger.show(10**12)
    assert isinstance(caught.value, LookupError) and isinstance(caught.value, LedgerqError)
