"""Ordering that blocks on the MySQL / MariaDB ledger (``keys.sql``, migration
m0010): what a worker registers for its kinds (``@task(ordering=...)``), and
``ledgerq tasks release-key``, as PostgreSQL's :mod:`ledgerq.ledger.keys`.

A dead task of a kind registered ``ordering="block"`` holds its key's later
tasks: the pick rule (fragments.sql ``ready``) passes over a keyed task while
an unreleased death of its key with a smaller id is in history, and the lock
that follows re-checks it on the latest committed rows.

:func:`release` runs PostgreSQL's plan (:func:`ledgerq.ledger.keys.release_plan`:
its validation, its report, its audit record) as a MySQL plan (:mod:`.plans`'
steps), each of its statements answered by MySQL's: the holders, the key's
tasks, the audit record (its id the insert's), the release (``INSERT IGNORE ...
SELECT`` from history fenced on (id, epoch, status), then the deaths it wrote
read back by audit id: no ``RETURNING``), the audit lines. The plan never
begins, commits or rolls back: the ledger's own ``release_key``
(:class:`~ledgerq.ledger.mysql.operations.MyOperations`) drives it in one
transaction it commits, the caller's (:mod:`.tx`, ``ledgerq.release_key``) in
the caller's transaction, which commits the release and its audit record
together or neither.

Races: two operators releasing one key at once: the second's insert meets the
first's rows (the primary key waits for the first to commit) and writes none,
so it reports them moved on; an operator retry of the dead task committed
meanwhile leaves a release of an epoch no death has any more, which holds
nothing. In the caller's transaction the released rows' primary keys stay
locked until it ends, so a second release of the key waits for that end (a
caller's transaction that rolls back leaves the second to release them).
"""

from __future__ import annotations

import json
from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Any, Unpack

from sqlalchemy import TextClause

from ledgerq.ledger.actions import Rows
from ledgerq.ledger.keys import KeyRelease, release_plan
from ledgerq.ledger.mysql.answer import Answer
from ledgerq.ledger.mysql.audit import AQ
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
Step = tuple[TextClause, Mapping[str, Any]]


def release(key: str, **options: Unpack[AuditOptions]) -> Generator[Step, Answer, KeyRelease]:
    """Release ``key`` (the module docstring): :func:`release_plan`'s statements as
    MySQL's; returns its :class:`KeyRelease`."""
    plan = release_plan(key, **options)
    try:  # the plan's batch boundary (None) is its end: whoever drives this commits
        step = next(plan)
        while True:
            step = plan.send([] if step is None else (yield from _answered(*step)))
    except StopIteration as stop:
        report: KeyRelease = stop.value
        return report


def _answered(statement: TextClause, params: Mapping[str, Any]) -> Generator[Step, Answer, Rows]:
    """PostgreSQL's ``statement`` as MySQL's statements; the rows it would have returned."""
    if statement is OQ.key_holders:
        return (yield KQ.key_holders, params).rows
    if statement is OQ.key_tasks:
        return (yield KQ.key_tasks, params).rows
    if statement is OQ.insert_audit:
        return [((yield AQ.insert_audit, params).last_id,)]
    if statement is OQ.release_key:
        audit = {"audit_id": params["audit_id"]}
        fences = list(zip(params["ids"], params["epochs"], strict=True))
        yield KQ.release_key, {"key": params["key"], "fences": fences, **audit}
        return (yield KQ.released, audit).rows
    if statement is OQ.record_audit_batch:
        audit = {"audit_id": params["audit_id"]}
        counts = {k: params[k] for k in ("matched", "changed", "skipped")}
        yield AQ.count_audit_batch, {**audit, **counts}
        outcomes = sorted(zip(params["task_ids"], params["outcomes"], strict=True))
        if outcomes:
            rows = json.dumps([list(outcome) for outcome in outcomes])
            yield AQ.record_audit_tasks, {**audit, "rows": rows}
        return []
    raise AssertionError(f"release_plan's statement has no MySQL answer: {statement}")
