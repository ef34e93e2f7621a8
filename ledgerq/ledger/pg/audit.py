"""One audit record, written in the caller's transaction, so it never describes
a change that did not commit: an operator's pause or rate limit, or the
system's own actions (the reconciler taking back tasks published to a route
that lost its subscribers)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.audit import SYSTEM_ACTOR as SYSTEM_ACTOR
from ledgerq.ledger.sql import OQ


async def record_audit(
    conn: AsyncConnection,
    action: str,
    selection: Mapping[str, Any],
    *,
    actor: str,
    reason: str | None = None,
    options: dict[str, Any] | None = None,
    task_ids: list[int] | None = None,
) -> int:
    """One audit record (and its tasks, outcome ``changed``) in ``conn``'s transaction."""
    audit_id = int(
        (
            await conn.execute(
                OQ.insert_audit,
                {
                    "actor": actor,
                    "action": action,
                    "selection": json.dumps(selection),
                    "options": json.dumps(options or {}),
                    "reason": reason,
                },
            )
        ).scalar_one()
    )
    ids = task_ids or []
    await conn.execute(
        OQ.record_audit_batch,
        {
            "audit_id": audit_id,
            "matched": len(ids),
            "changed": len(ids),
            "skipped": 0,
            "task_ids": ids,
            "outcomes": ["changed"] * len(ids),
        },
    )
    return audit_id
