"""Audit records every ledger writes alike, whatever its statements: the writer's
shape (:class:`AuditWriter`, each server's ``record_audit``:
:mod:`ledgerq.ledger.pg.audit`, :mod:`ledgerq.ledger.mysql.audit`), the actor of
the ledger's own changes (:data:`SYSTEM_ACTOR`), and the rescue's record
(:func:`record_rescue`).

Contract: a record is written in the transaction of the change it describes, so
it exists exactly when the change committed; nothing here commits.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.model import ExpiredLease, Finished, rescue_audit

#: The actor recorded for what ledgerq does on its own (no person asked).
SYSTEM_ACTOR = "ledgerq"


class AuditWriter(Protocol):
    """A ledger's ``record_audit``: one audit record in ``conn``'s transaction (and
    ``task_ids``, each ``changed``); its id."""

    async def __call__(
        self,
        conn: AsyncConnection,
        action: str,
        selection: Mapping[str, Any],
        *,
        actor: str,
        reason: str | None = None,
        options: dict[str, Any] | None = None,
        task_ids: list[int] = ...,
    ) -> int: ...


async def record_rescue(
    conn: AsyncConnection,
    rows: Iterable[ExpiredLease],
    finished: Iterable[Finished],
    record_audit: AuditWriter,
) -> None:
    """In ``conn``'s transaction, the audit record (actor :data:`SYSTEM_ACTOR`) of the
    ``finished`` rows of a rescued page that were taken from a dead worker before
    their leases ran out (:func:`~ledgerq.ledger.model.rescue_audit`); none when
    there are none."""
    audit = rescue_audit(rows, finished)
    if audit is not None:
        await record_audit(
            conn,
            audit.action,
            audit.selection,
            actor=SYSTEM_ACTOR,
            reason=audit.reason,
            task_ids=audit.task_ids,
        )
