"""Test your tasks against your own test database, without a relay, a broker or a worker.

For users' test suites (as Celery's eager mode, ``Oban.Testing`` or River's
``rivertest``), never imported by ledgerq's services::

    from ledgerq.testing import drain, enqueued, advance

    def test_checkout_sends_a_receipt(engine):
        checkout(engine, order_id=7)                  # the code under test enqueues
        [receipt] = enqueued(engine, "send_receipt")
        assert receipt.payload == {"order_id": 7}
        assert drain(engine).succeeded == 1           # runs it as a worker would

- :func:`drain` / :func:`adrain` run every due task in the calling process
  through the worker's own claim, handler runner and finish statement, until
  none is due, and count how each attempt ended (:class:`DrainResult`).
- :func:`enqueued` / :func:`aenqueued` list what is enqueued and not started
  (:class:`EnqueuedTask`), in the caller's transaction.
- :func:`advance` / :func:`aadvance` move time forward for pending tasks (their
  ``run_at`` moves earlier): delayed tasks and retries come due.
- :func:`reset` / :func:`areset` empty the ledger between tests.
- ``pytest_plugins = ["ledgerq.testing.pytest_plugin"]`` adds fixtures.

How-to: docs/howto.md, "Test your tasks".
"""

from __future__ import annotations

from ledgerq.testing.drain import (
    DrainResult,
    NoHandlerError,
    Run,
    UncommittedTasksError,
    adrain,
    drain,
)
from ledgerq.testing.tasks import (
    EnqueuedTask,
    aadvance,
    advance,
    aenqueued,
    areset,
    enqueued,
    reset,
)

__all__ = [
    "DrainResult",
    "EnqueuedTask",
    "NoHandlerError",
    "Run",
    "UncommittedTasksError",
    "aadvance",
    "adrain",
    "advance",
    "aenqueued",
    "areset",
    "drain",
    "enqueued",
    "reset",
]
