"""One audit record on the MySQL ledger, written in the caller's transaction, so it
never describes a change that did not commit: an operator's action, or the
system's own (the reconciler taking back tasks published to a route that lost
its subscribers). PostgreSQL's :mod:`ledgerq.ledger.pg.audit`, in two
statements where PostgreSQL needs one (no ``RETURNING``: the record's id is the
driver's ``lastrowid``), and the tasks as a JSON array read by ``JSON_TABLE``
(no ``unnest``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.audit import SYSTEM_ACTOR as SYSTEM_ACTOR
from ledgerq.ledger.sql import load


@dataclass(frozen=True)
class AuditQueries:
    """``ledger/mysql/audit.sql``."""

    insert_audit: TextClause
    count_audit_batch: TextClause
    record_audit_tasks: TextClause


AQ: AuditQueries = load(AuditQueries, "ledgerq.ledger.mysql", "audit.sql")


async def record_audit(
    conn: AsyncConnection,
    action: str,
    selection: Mapping[str, Any],
    *,
    actor: str,
    reason: str | None = None,
    options: dict[str, Any] | None = None,
    task_ids: Sequence[int] = (),
) -> int:
    """One audit record (and its tasks, outcome ``changed``) in ``conn``'s transaction;
    its id."""
    inserted = await conn.execute(
        AQ.insert_audit,
        {
            "actor": actor,
            "action": action,
            "selection": json.dumps(selection),
            "options": json.dumps(options or {}),
            "reason": reason,
        },
    )
    audit_id = int(inserted.lastrowid)
    await record_audit_batch(conn, audit_id, {task_id: "changed" for task_id in task_ids})
    return audit_id


async def record_audit_batch(
    conn: AsyncConnection, audit_id: int, outcomes: Mapping[int, str], *, skipped: int = 0
) -> None:
    """Add one batch to audit record ``audit_id``: the tasks it matched and what happened
    to each (``changed``, or why not), and ``skipped`` tasks it matched but left."""
    changed = sum(1 for outcome in outcomes.values() if outcome == "changed")
    await conn.execute(
        AQ.count_audit_batch,
        {
            "audit_id": audit_id,
            "matched": len(outcomes) + skipped,
            "changed": changed,
            "skipped": len(outcomes) - changed + skipped,
        },
    )
    if outcomes:
        rows = json.dumps([[task_id, outcome] for task_id, outcome in sorted(outcomes.items())])
        await conn.execute(AQ.record_audit_tasks, {"audit_id": audit_id, "rows": rows})
