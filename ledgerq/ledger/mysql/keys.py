"""Ordering that blocks on the MySQL / MariaDB ledger (``keys.sql``, migration
m0010): what a worker registers for its kinds (``@task(ordering=...)``), and
``ledgerq tasks release-key``, as PostgreSQL's :mod:`ledgerq.ledger.keys`.

A dead task of a kind registered ``ordering="block"`` holds its key's later
tasks: the pick rule (fragments.sql ``ready``) passes over a keyed task while
an unreleased death of its key with a smaller id is in history, and the lock
that follows re-checks it on the latest committed rows.

:func:`release_key` runs PostgreSQL's plan (:func:`ledgerq.ledger.keys.release_plan`:
its validation, its report, its audit record) in one transaction of the
ledger's own, each of the plan's statements answered by MySQL's: the holders,
the key's tasks, the audit record (its id the insert's), the release (``INSERT
IGNORE ... SELECT`` from history fenced on (id, epoch, status), then the deaths
it wrote read back by audit id: no ``RETURNING``), the audit lines. Two
operators releasing one key at once: the second's insert meets the first's rows
(the primary key waits for the first to commit) and writes none, so it reports
them moved on; an operator retry of the dead task committed meanwhile leaves a
release of an epoch no death has any more, which holds nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import TextClause
from sqlalchemy.ext.asyncio import AsyncConnection

from ledgerq.ledger.actions import Rows
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.mysql.audit import AQ, record_audit_batch
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.options import AuditOptions
from ledgerq.ledger.sql import OQ, load_in_lists


@dataclass(frozen=True)
class KeyQueries:
    """``ledger/mysql/keys.sql``."""

    kind_orderings: TextClause
    set_ordering: TextClause
    key_holders: TextClause
    key_tasks: TextClause
    release_key: TextClause
    released: TextClause


KQ: KeyQueries = load_in_lists(KeyQueries, "ledgerq.ledger.mysql", "keys.sql", LIBRARY)


async def release_key(
    conn: AsyncConnection, key: str, **options: Unpack[AuditOptions]
) -> KeyRelease:
    """Release ``key`` in ``conn``'s transaction (the module docstring)."""

    async def run(statement: TextClause, params: Mapping[str, Any]) -> Rows:
        if statement is OQ.key_holders:
            return (await conn.execute(KQ.key_holders, params)).all()
        if statement is OQ.key_tasks:
            return (await conn.execute(KQ.key_tasks, params)).all()
        if statement is OQ.insert_audit:
            return [((await conn.execute(AQ.insert_audit, params)).lastrowid,)]
        if statement is OQ.release_key:
            fences = list(zip(params["ids"], params["epochs"], strict=True))
            release = {"key": params["key"], "fences": fences, "audit_id": params["audit_id"]}
            await conn.execute(KQ.release_key, release)
            return (await conn.execute(KQ.released, {"audit_id": params["audit_id"]})).all()
        if statement is OQ.record_audit_batch:
            outcomes = dict(zip(params["task_ids"], params["outcomes"], strict=True))
            await record_audit_batch(conn, params["audit_id"], outcomes)
            return []
        raise AssertionError(f"release_plan's statement has no MySQL answer: {statement}")

    plan = release_plan(key, **options)
    try:  # the plan's batch boundary (None) is the end: the caller commits
        step = next(plan)
        while True:
            step = plan.send([] if step is None else await run(*step))
    except StopIteration as stop:
        report: KeyRelease = stop.value
        return report
