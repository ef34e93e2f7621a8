"""Log records about a task, and log lines for a machine (``--log-format json``).

While a worker runs a task's handler, :data:`current_task` holds its id, kind
and attempt (set by the worker for the handler's whole run, sync handlers'
threads included); :class:`TaskFields` copies them onto every record logged
meanwhile, by ledgerq or by the handler's own code, unless the record already
names a task (``extra=``, as the alert and timeout lines do). Setting a context
variable per task is the whole hot-path cost.

:class:`JsonFormatter` writes one JSON object per line: ``time`` (UTC, ISO
8601), ``level``, ``logger``, ``message``, then ``task_id``, ``kind`` and
``attempt`` when the line is about a task, and ``error`` (the traceback) when
there is one. It formats what the handler's filters left, so the secret filter
(:class:`~ledgerq.core.masking.SecretFilter`) has masked the message and the
traceback before they are written.
"""

from __future__ import annotations

import json
import logging
from contextvars import ContextVar
from datetime import UTC, datetime

#: (task id, kind, attempt) of the handler running in this context, if any.
current_task: ContextVar[tuple[int, str, int] | None] = ContextVar(
    "ledgerq_current_task", default=None
)

TASK_FIELDS = ("task_id", "kind", "attempt")


class TaskFields(logging.Filter):
    """Adds ``task_id``, ``kind`` and ``attempt`` of the running task to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "task_id"):
            running = current_task.get()
            if running is not None:
                record.task_id, record.kind, record.attempt = running
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in TASK_FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                line[name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["error"] = record.exc_text
        return json.dumps(line, default=str)
