"""Every fenced write to a running row finds it by its primary key, also when the
hot table's statistics are stale (after a TRUNCATE or a bulk enqueue, or with
autovacuum off): the lease index must not offer the planner a way to look rows
up by id (migration 0013). With ``(lease_until, id)`` it did, read the whole
index for each id, and a batched window's lock took milliseconds."""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import TextClause, create_engine, text

from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.params import outcome_params
from ledgerq.ledger.pg.engines import WORKER_PLANNER
from ledgerq.ledger.sql import Q
from tests.harness import db

RUNNING = 20_000
#: Never analyzed: the hot table was just truncated, and nothing runs ANALYZE here.
FILL = text(
    """
    INSERT INTO ledgerq_tasks (kind, status, epoch, attempts, lease_until, worker)
    SELECT 'plan.kind', 'running', 1, 1, now() + interval '1 minute', 'w'
    FROM generate_series(1, :n)
    RETURNING id
    """
)


SET_LOCAL = text("SELECT set_config(:name, :value, true)")


def plan_of(
    settings: Settings, statement: TextClause, params: dict[str, Any], planner: tuple[str, ...]
) -> str:
    """The plan of ``statement`` under the ``planner`` settings its caller runs it with."""
    engine = create_engine(settings.database_url)
    try:
        with engine.connect() as conn:
            for setting in planner:
                name, value = setting.split("=")
                conn.execute(SET_LOCAL, {"name": name, "value": value})
            # EXPLAIN of the named statement itself, with its own parameters.
            explained = text("EXPLAIN " + statement.text)
            plan = "\n".join(r[0] for r in conn.execute(explained, params))
            conn.rollback()
    finally:
        engine.dispose()
    return plan


@pytest.fixture
def running_ids(settings: Settings) -> list[int]:
    with db(settings) as conn:
        # (the fixture's truncate DELETEs a few rows; a TRUNCATE resets the statistics)
        conn.execute("TRUNCATE ledgerq_tasks")
        conn.commit()
        stats = conn.execute(
            "SELECT reltuples FROM pg_class WHERE relname = 'ledgerq_tasks'"
        ).fetchone()
        assert stats is not None and stats[0] < 0  # never analyzed: stale
    engine = create_engine(settings.database_url)
    try:
        with engine.begin() as conn:
            ids = [int(r[0]) for r in conn.execute(FILL, {"n": RUNNING})]
    finally:
        engine.dispose()
    return ids


def _fences(ids: list[int]) -> dict[str, list[int]]:
    picked = ids[:: len(ids) // 50][:50]
    return {"ids": picked, "epochs": [1] * len(picked)}


#: Each statement, and the planner settings it runs under: the worker's own pool's,
#: or (lock_running, in a batched window on the handlers' connection) none.
STATEMENTS = {
    "lock_running": (),
    "finish": WORKER_PLANNER,
    "heartbeat": WORKER_PLANNER,
    "save_checkpoint": (),
}


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_fenced_writes_to_running_rows_look_them_up_by_primary_key(
    settings: Settings, running_ids: list[int], name: str
) -> None:
    fences = _fences(running_ids)
    every: dict[str, dict[str, Any]] = {
        "lock_running": fences,
        "finish": outcome_params([Outcome.succeeded((i, 1), None) for i in fences["ids"]]),
        "heartbeat": {**fences, "lease_s": 30.0, "progress": [None] * len(fences["ids"])},
        "save_checkpoint": {"id": running_ids[7], "epoch": 1, "checkpoint": "{}"},
    }
    plan = plan_of(settings, getattr(Q, name), every[name], STATEMENTS[name])
    assert "ledgerq_tasks_pk" in plan, plan
    assert "ledgerq_tasks_leases" not in plan, plan
