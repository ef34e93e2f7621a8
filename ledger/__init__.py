"""ledgerq's ledger: schema, state machine, the producer's outbox helper, inspection.

Producers need only this package::

    from ledger import enqueue

    with Session(engine) as session, session.begin():
        session.add(order)
        enqueue(session, "send_receipt", {"order_id": order.id})
"""

from __future__ import annotations

from ledger.errors import (
    InvalidRetryPolicyError,
    InvalidTaskError,
    LedgerqError,
    PayloadTooLargeError,
    ServiceUnavailableError,
    TaskNotFoundError,
)
from ledger.producer import TaskSpec, aenqueue, aenqueue_many, enqueue, enqueue_many
from ledger.retry import RetryPolicy
from ledger.states import Status
from ledger.validation import MAX_PAYLOAD_BYTES

__all__ = [
    "MAX_PAYLOAD_BYTES",
    "InvalidRetryPolicyError",
    "InvalidTaskError",
    "LedgerqError",
    "PayloadTooLargeError",
    "RetryPolicy",
    "ServiceUnavailableError",
    "Status",
    "TaskNotFoundError",
    "TaskSpec",
    "aenqueue",
    "aenqueue_many",
    "enqueue",
    "enqueue_many",
]
