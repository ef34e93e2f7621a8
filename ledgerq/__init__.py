"""ledgerq: tasks kept in a PostgreSQL ledger, moved through RabbitMQ.

The public API. A producer enqueues in its own transaction::

    from ledgerq import enqueue

    with Session(engine) as session, session.begin():
        session.add(order)
        enqueue(session, "send_receipt", {"order_id": order.id})

and an application registers handlers for ``ledgerq worker --app``::

    from ledgerq import task

    @task("send_receipt")
    def send_receipt(payload, ctx):
        ctx.session.execute(...)  # commits together with the task's "succeeded"

Operators' scripts use :mod:`ledgerq.admin` (``from ledgerq import admin``):
every admin command of the CLI as a function, sync and async.

Importing this module loads no broker client, and not :mod:`ledgerq.admin`:
that package is imported the first time ``ledgerq.admin`` is used (PEP 562), so
a producer's process pays for the producer's modules only.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from ledgerq.consumers.context import AsyncTaskContext, TaskContext
from ledgerq.consumers.execute import Abort
from ledgerq.consumers.handles import TaskHandle
from ledgerq.consumers.progress import LeaseLostError
from ledgerq.consumers.registry import Registry, RegistryError, default_registry, task
from ledgerq.consumers.results import Cancelled
from ledgerq.core.errors import (
    ConfigError,
    CredentialsRefusedError,
    FamilyCompletedError,
    InvalidFilterError,
    InvalidRetryPolicyError,
    InvalidTaskError,
    LedgerqError,
    PayloadTooLargeError,
    PrivilegeMissingError,
    SchemaError,
    SchemaMissingError,
    ServiceUnavailableError,
    StorageError,
    TaskNotFoundError,
    TransientStorageError,
    UnknownParentError,
    WrongShardError,
)
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.after import (
    DependencyError,
    DependencyShardError,
    SelfDependencyError,
    UnknownDependencyError,
)
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.operations import aact, act, alist_tasks, list_tasks
from ledgerq.ledger.producer import (
    EnqueueOptions,
    TaskSpec,
    aenqueue,
    aenqueue_many,
    enqueue,
    enqueue_many,
)
from ledgerq.ledger.results import TaskResult, aresult, result
from ledgerq.ledger.retry import RetryPolicy
from ledgerq.ledger.split.router import Shards
from ledgerq.ledger.states import Status
from ledgerq.ledger.validation import MAX_PAYLOAD_BYTES

if TYPE_CHECKING:
    from ledgerq import admin


def __getattr__(name: str) -> object:
    if name == "admin":
        return importlib.import_module("ledgerq.admin")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "MAX_PAYLOAD_BYTES",
    "Abort",
    "Action",
    "AsyncTaskContext",
    "Cancelled",
    "ConfigError",
    "CredentialsRefusedError",
    "DependencyError",
    "DependencyShardError",
    "EnqueueOptions",
    "FamilyCompletedError",
    "InvalidFilterError",
    "InvalidRetryPolicyError",
    "InvalidTaskError",
    "LeaseLostError",
    "LedgerqError",
    "PayloadTooLargeError",
    "PrivilegeMissingError",
    "Registry",
    "RegistryError",
    "Report",
    "RetryPolicy",
    "SchemaError",
    "SchemaMissingError",
    "SelfDependencyError",
    "ServiceUnavailableError",
    "Shards",
    "Status",
    "StorageError",
    "TaskContext",
    "TaskFilter",
    "TaskHandle",
    "TaskNotFoundError",
    "TaskResult",
    "TaskSpec",
    "TransientStorageError",
    "UnknownDependencyError",
    "UnknownParentError",
    "WrongShardError",
    "aact",
    "act",
    "admin",
    "aenqueue",
    "aenqueue_many",
    "alist_tasks",
    "aresult",
    "default_registry",
    "enqueue",
    "enqueue_many",
    "list_tasks",
    "result",
    "task",
]
