"""``manage.py place_order EMAIL``: an order and its receipt task in one ``transaction.atomic()``.

Prints the ids as JSON. ``--fail-after-enqueue`` raises inside the block after
``enqueue`` returned (both roll back); ``--also-in-failed-savepoint`` enqueues one
more task in a nested block that fails (its savepoint rolls back, the rest commits).
"""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connection, transaction

from ledgerq import enqueue

from ...models import Order


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("email")
        parser.add_argument("--fail-after-enqueue", action="store_true")
        parser.add_argument("--also-in-failed-savepoint", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        ids: dict[str, int] = {}
        try:
            with transaction.atomic():
                order = Order.objects.create(email=options["email"])
                ids["order_id"] = order.pk
                ids["task_id"] = enqueue(connection, "shop.send_receipt", {"order_id": order.pk})
                if options["also_in_failed_savepoint"]:
                    try:
                        with transaction.atomic():
                            ids["dropped_id"] = enqueue(connection, "shop.send_receipt", {})
                            raise RuntimeError("the nested block failed")
                    except RuntimeError:
                        pass
                if options["fail_after_enqueue"]:
                    raise RuntimeError("the business failed after enqueue")
        except RuntimeError as exc:
            raise CommandError(f"{exc}: {json.dumps(ids)}") from exc
        finally:
            self.stdout.write(json.dumps(ids))
