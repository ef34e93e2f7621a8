"""ledgerq's consumers: the handler registry and the worker runtime.

from consumers import task

@task("send_receipt")
def send_receipt(payload, ctx):
    ctx.session.execute(...)   # commits together with the task's status
"""

from __future__ import annotations

from consumers.context import AsyncTaskContext, TaskContext
from consumers.execute import Abort
from consumers.registry import Registry, RegistryError, default_registry, task

__all__ = [
    "Abort",
    "AsyncTaskContext",
    "Registry",
    "RegistryError",
    "TaskContext",
    "default_registry",
    "task",
]
