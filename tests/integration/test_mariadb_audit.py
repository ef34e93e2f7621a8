"""The MySQL ledger's audit records (ledger/mysql/audit.py) on the real MariaDB: a
record and its tasks commit with the caller's transaction or not at all."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from ledgerq.compose.storage import async_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql.audit import SYSTEM_ACTOR, record_audit, record_audit_batch


@pytest.fixture
async def engine(mariadb_settings: Settings) -> AsyncIterator[AsyncEngine]:
    opened = async_engine(mariadb_settings, "ledgerq-test-audit", pool_size=2)
    async with opened.begin() as conn:
        await conn.execute(text("DELETE FROM ledgerq_audit"))
    yield opened
    await opened.dispose()


async def _records(engine: AsyncEngine) -> list[tuple[object, ...]]:
    async with engine.connect() as conn:
        rows = await conn.execute(
            text(
                "SELECT a.id, a.actor, a.action, a.selection, a.reason, a.matched, a.changed,"
                " a.skipped, t.task_id, t.outcome FROM ledgerq_audit a"
                " LEFT JOIN ledgerq_audit_tasks t ON t.audit_id = a.id ORDER BY a.id, t.task_id"
            )
        )
        return [tuple(r) for r in rows]


async def test_a_record_and_its_tasks_commit_with_the_change(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        audit_id = await record_audit(
            conn,
            "unpublish_unserved",
            {"queue": ["q"]},
            actor=SYSTEM_ACTOR,
            reason="why",
            task_ids=[7, 3],
        )
        await record_audit_batch(conn, audit_id, {9: "not pending", 3: "changed"}, skipped=1)
    rows = await _records(engine)
    assert [(r[8], r[9]) for r in rows] == [(3, "changed"), (7, "changed"), (9, "not pending")]
    first = rows[0]
    assert first[0] == audit_id
    assert (first[1], first[2], json.loads(str(first[3])), first[4]) == (
        "ledgerq",
        "unpublish_unserved",
        {"queue": ["q"]},
        "why",
    )
    # two changed of the first batch; the second matched three (one changed, one
    # refused, one skipped); task 3's first outcome stays
    assert (first[5], first[6], first[7]) == (5, 3, 2)


async def test_a_rolled_back_change_leaves_no_record(engine: AsyncEngine) -> None:
    with pytest.raises(RuntimeError, match="rolled back"):
        async with engine.begin() as conn:
            await record_audit(conn, "cancel", {}, actor="op", task_ids=[1])
            raise RuntimeError("rolled back")
    assert await _records(engine) == []
