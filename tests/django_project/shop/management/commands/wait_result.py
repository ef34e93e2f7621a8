"""``manage.py wait_result TASK_ID``: ``ledgerq.result`` with Django's own connection.

Waits (at most ``--timeout`` seconds) for the task to end and prints its status and
value as JSON: ``result()`` takes Django's connection as ``enqueue`` does.
"""

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import connection

from ledgerq import result


class Command(BaseCommand):
    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("task_id", type=int)
        parser.add_argument("--timeout", type=float, default=60.0)

    def handle(self, *args: Any, **options: Any) -> None:
        done = result(connection, options["task_id"], timeout=options["timeout"])
        self.stdout.write(json.dumps({"status": done.status, "value": done.value}))
