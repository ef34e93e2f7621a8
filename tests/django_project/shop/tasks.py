"""The shop's handlers: found by ``manage.py ledgerq worker`` with no ``--app``."""

from typing import Any

from ledgerq import TaskContext, task

from .models import Receipt


@task("shop.send_receipt")
def send_receipt(payload: dict[str, Any], ctx: TaskContext) -> None:
    # Through the ORM (its own transaction): idempotent, so a redelivery writes nothing.
    Receipt.objects.get_or_create(order_id=payload["order_id"], defaults={"task_id": ctx.id})
