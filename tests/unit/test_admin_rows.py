"""The admin results' rows (ledgerq/admin/results.py): a column is read as a time
because its field is typed ``datetime`` (or ``datetime | None``); the others, and
the columns this version does not name, are kept as they came."""

from __future__ import annotations

from datetime import UTC, datetime

from ledgerq.admin.reports import Unserved
from ledgerq.admin.results import AuditRecord, TaskRow

WHEN = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_the_datetime_fields_are_read_from_iso_8601_and_written_back() -> None:
    row = TaskRow.from_row(
        {
            "id": 1, "kind": "k", "queue": "q", "status": "pending", "attempts": 0,
            "max_attempts": 3, "priority": 5, "run_at": WHEN.isoformat(),
            "created_at": WHEN, "finished_at": None, "last_error": "2026-01-02",
            "new_column": WHEN.isoformat(),
        }
    )  # fmt: skip
    assert row.run_at == WHEN and row.created_at == WHEN and row.finished_at is None
    assert row.last_error == "2026-01-02"  # a str field stays a str
    assert row.extra == {"new_column": WHEN.isoformat()}
    data = row.to_json()
    assert data["run_at"] == data["created_at"] == WHEN.isoformat()
    assert data["new_column"] == WHEN.isoformat()


def test_each_row_class_reads_its_own_time_columns() -> None:
    audit = AuditRecord.from_row(
        {
            "id": 1, "at": WHEN.isoformat(), "actor": "a", "action": "retry",
            "selection": {}, "options": {}, "reason": None, "matched": 1, "changed": 1,
            "skipped": 0, "finished_at": WHEN.isoformat(),
        }
    )  # fmt: skip
    assert audit.at == WHEN and audit.finished_at == WHEN
    unserved = Unserved.from_row(
        {"queue": "q", "kind": "k", "shard": 0, "tasks": 2, "oldest": WHEN.isoformat()}
    )
    assert unserved.oldest == WHEN
