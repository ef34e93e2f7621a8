"""What a statement refuses: bad data is a :class:`~ledgerq.core.errors.StorageError`
that is not transient, and changes nothing, on every implementation."""

from __future__ import annotations

import psycopg
import pytest

from ledgerq.core.errors import StorageError
from ledgerq.ledger.split.ledger import ShardLedger
from tests.conformance.support import Enqueue, claim_one


async def test_bad_data_surfaces_as_a_storage_error_that_is_not_transient(
    ledger: ShardLedger, enqueue: Enqueue
) -> None:
    [task_id] = enqueue("conf.bad")
    task = await claim_one(ledger, task_id)

    # NaN is not JSON: PostgreSQL refuses the document.
    with pytest.raises(StorageError) as caught:
        await ledger.save_checkpoint(task.fence, {"ratio": float("nan")})

    assert type(caught.value) is StorageError
    assert not isinstance(caught.value, psycopg.Error)
    assert (await ledger.show(task_id))["checkpoint"] is None
