"""Expiry on the MySQL / MariaDB ledger (``expires=`` / ``expires_at``): a task not
started by its expiry never starts. As on PostgreSQL, the pick does not look at
the expiry: a claim that locked an expired row ends it instead of running it
(:func:`end_expired`, run by both claims before they claim), and the expiry
service ends the rest a page at a time (:func:`expire_page`, the reconciler's
``expire_due``). Either way the row goes to history ``cancelled`` with
``expired`` set and ``last_error`` "expired: not started by <time>", no attempt
ended, and one audit record per statement's batch (actor ``ledgerq``, action
``expire``, each task ``changed``), in the caller's transaction, which then
judges what waited for them and their families, as every plan that ends tasks
does (:func:`.families.after_ended`: a dependent of an expired task is cancelled,
a family whose last member expired completes).

Races: the rows are locked before they are judged (the claims' locks;
``expiring``'s ``SKIP LOCKED``), and judged on their latest version, so a row
a worker claimed meanwhile (running: it started in time) is left alone, and a
row a relay is publishing is skipped by the service and met by its claim.

Plans as :mod:`.plans`' (generators of named statements), written against the
statement's answer type alone, so :mod:`.plans` can run them inside its claims.
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.mysql import families
from ledgerq.ledger.mysql.answer import Answer
from ledgerq.ledger.mysql.audit import AQ, SYSTEM_ACTOR
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.sql import load_in_lists

#: The audit record's reason, PostgreSQL's (fragments.sql expired_burial).
REASON = "not started by its expiry, expires_at"

_Plan = Generator[tuple[TextClause, Mapping[str, Any]], Answer, list[int]]


@dataclass(frozen=True)
class ExpiryQueries:
    """``ledger/mysql/expiry.sql``."""

    expired_among: TextClause
    expiring: TextClause
    bury_expired: TextClause
    delete_expired: TextClause


XQ: ExpiryQueries = load_in_lists(ExpiryQueries, "ledgerq.ledger.mysql", "expiry.sql", LIBRARY)


def end_expired(ids: list[int]) -> _Plan:
    """Of the rows ``ids`` the caller locked, end those past their expiry that have
    not started; their ids (the caller claims the others)."""
    if not ids:
        return []
    due = yield XQ.expired_among, {"ids": ids}
    return (yield from _end([int(r[0]) for r in due.rows]))


def expire_page(limit: int) -> _Plan:
    """End up to ``limit`` queued rows past their expiry (rows another transaction
    holds are skipped); their ids."""
    page = yield XQ.expiring, {"limit": limit}
    return (yield from _end(sorted(int(r[0]) for r in page.rows)))


def _end(ids: list[int]) -> _Plan:
    """Bury the locked rows ``ids`` cancelled and expired, delete them, audit it."""
    if not ids:
        return []
    yield XQ.bury_expired, {"ids": ids}
    yield XQ.delete_expired, {"ids": ids}
    record = {
        "actor": SYSTEM_ACTOR,
        "action": "expire",
        "selection": "{}",
        "options": "{}",
        "reason": REASON,
    }
    inserted = yield AQ.insert_audit, record
    audit_id = inserted.last_id
    counts = {"matched": len(ids), "changed": len(ids), "skipped": 0}
    yield AQ.count_audit_batch, {"audit_id": audit_id, **counts}
    rows = json.dumps([[task_id, "changed"] for task_id in ids])
    yield AQ.record_audit_tasks, {"audit_id": audit_id, "rows": rows}
    yield from families.after_ended(dict.fromkeys(ids, "cancelled"))
    return ids
