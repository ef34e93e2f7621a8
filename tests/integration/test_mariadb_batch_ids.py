"""``enqueue_many``'s one-statement batch on MariaDB gives each task its id in input
order both ways the server can give them back (ledger/mysql/batch.sql,
``server_batch_ids``): consecutive from the first (innodb_autoinc_lock_mode 0
or 1, the server's default here) and by ``RETURNING id`` (mode 2, which cannot
be switched on a running server: the plan is driven with that answer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text
from sqlalchemy.orm import Session

from ledgerq import TaskSpec
from ledgerq.compose.storage import sync_engine
from ledgerq.core.config import Settings
from ledgerq.ledger.mysql import batch, inserts, plans


@pytest.fixture
def engine(mariadb_settings: Settings) -> Iterator[Engine]:
    eng = sync_engine(mariadb_settings, "ledgerq-test-batch-ids", pool_size=1)
    with eng.begin() as conn:
        conn.execute(text("DELETE FROM ledgerq_tasks"))
    yield eng
    eng.dispose()


@pytest.mark.parametrize("back", [batch.IdsBack(True, True, 1), batch.IdsBack(False, True, 1)])
def test_a_batch_gets_its_ids_in_input_order(engine: Engine, back: batch.IdsBack) -> None:
    specs = [TaskSpec("batch.ids", {"n": n}) for n in range(300)]
    run = [inserts.insert_params(spec) for spec in specs]
    with Session(engine) as session, session.begin():
        ids = plans.drive(inserts._insert_batch(run, back), plans.runner(session, "test"))
    with engine.connect() as conn:
        stored: dict[int, str] = dict(
            conn.execute(
                text("SELECT id, JSON_VALUE(payload, '$.n') FROM ledgerq_tasks WHERE kind = :k"),
                {"k": "batch.ids"},
            ).all()
        )
    assert len(ids) == len(set(ids)) == 300
    assert [int(stored[i]) for i in ids] == list(range(300))
