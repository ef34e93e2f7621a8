"""The ledger's cost per dependency edge (issue 27), without the broker.

Usage: python scripts/measure_dependencies.py [--rounds 2] [--groups 100] [--width 100] [--cost]

Runs against the database ``LEDGERQ_DATABASE_URL`` names (a scratch one, migrated:
its tasks, history and edges are truncated before each drain). ROUNDS rounds,
each two drains in one process through the storage seam (``claim`` then
``finish`` of the 50 lowest pending ids, until none is left), the plain one
first: GROUPS x WIDTH no-op tasks, one transaction per group; then the graph:
the same, but the last task of each group enqueued ``after`` the other WIDTH - 1
(GROUPS x (WIDTH - 1) edges). Prints one JSON object: tasks/s of every drain,
their ratio and the extra microseconds per edge per round.

``--cost`` measures in PostgreSQL alone instead (no Python between statements):
ROUNDS rounds of a ``DO`` block that builds 40 groups of 99 tasks (plain, then
each joined by a task ``after`` them) and ends them 33 at a time in ``finish``'s
shape (DELETE from the hot table, INSERT into history, the triggers firing),
timing microseconds per ended task. One transaction per block, so its dead
tuples accumulate: an upper bound.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from dataclasses import replace
from typing import Any

import psycopg
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue, enqueue_many
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url

BATCH = 50

COST_SQL = """
DO $$
DECLARE t0 timestamptz; g int; ids bigint[]; j bigint; graph boolean;
BEGIN
  FOREACH graph IN ARRAY ARRAY[false, true] LOOP
    TRUNCATE ledgerq_tasks, ledgerq_history, ledgerq_dependencies;
    FOR g IN 1..40 LOOP
      ids := ARRAY(SELECT nextval('ledgerq_task_id_seq') FROM generate_series(1, 99));
      INSERT INTO ledgerq_tasks (id, kind, queue, status)
      SELECT u, 'm', 'default', 'pending' FROM unnest(ids) u;
      j := nextval('ledgerq_task_id_seq');
      INSERT INTO ledgerq_tasks (id, kind, queue, status) VALUES (j, 'j', 'default', 'pending');
      IF graph THEN
        PERFORM ledgerq_after_add(array_fill(j, ARRAY[99]), ids, array_fill(false, ARRAY[99]));
      END IF;
    END LOOP;
    t0 := clock_timestamp();
    LOOP
      ids := ARRAY(SELECT id FROM ledgerq_tasks WHERE kind = 'm' ORDER BY id LIMIT 33);
      EXIT WHEN cardinality(ids) = 0;
      WITH ended AS (DELETE FROM ledgerq_tasks WHERE id = ANY(ids) RETURNING *)
      INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                                   attempts, max_attempts, epoch, created_at, finished_at,
                                   publishes, suspect)
      SELECT id, kind, queue, payload, priority, shard, run_at, 'succeeded', attempts,
             max_attempts, epoch, created_at, now(), publishes, suspect FROM ended;
    END LOOP;
    RAISE NOTICE '% %', CASE WHEN graph THEN 'graph' ELSE 'plain' END,
      extract(epoch from clock_timestamp() - t0) * 1e6 / (40 * 99);
  END LOOP;
END $$
"""


def cost(url: str, rounds: int) -> dict[str, Any]:
    """``--cost``: microseconds per ended task, plain and graph, per round."""
    runs: list[dict[str, float]] = []
    with psycopg.connect(libpq_url(url), autocommit=True) as conn:
        for _ in range(rounds):
            notes: list[str] = []
            conn.add_notice_handler(lambda d: notes.append(str(d.message_primary)))
            conn.execute(COST_SQL)
            found = {n.split()[0]: float(n.split()[1]) for n in notes}
            runs.append(
                {
                    "plain_us": round(found["plain"], 1),
                    "graph_us": round(found["graph"], 1),
                    "extra_us_per_edge": round(found["graph"] - found["plain"], 1),
                }
            )
            conn.execute("TRUNCATE ledgerq_tasks, ledgerq_history, ledgerq_dependencies")
    return {"cost": runs}


def backlog(engine: Engine, groups: int, width: int, graph: bool) -> None:
    with engine.begin() as conn:
        conn.execute(text("TRUNCATE ledgerq_tasks, ledgerq_history, ledgerq_dependencies"))
    for _ in range(groups):
        with Session(engine) as session, session.begin():
            ids = enqueue_many(session, [TaskSpec("measure.noop") for _ in range(width - 1)])
            enqueue(session, "measure.noop", after=ids if graph else None)


async def drain(ledger: PgLedger, engine: Engine, total: int) -> float:
    started, done = time.perf_counter(), 0
    while True:
        with engine.connect() as conn:
            ids = [
                int(r[0])
                for r in conn.execute(
                    text(
                        "SELECT id FROM ledgerq_tasks WHERE status = 'pending' ORDER BY id LIMIT :n"
                    ),
                    {"n": BATCH},
                )
            ]
        if not ids:
            break
        won = await ledger.claim([(i, 0) for i in ids], "measure", 60.0)
        await ledger.finish([Outcome.succeeded(t.fence) for t in won])
        done += len(won)
    assert done == total, f"{done} of {total} finished"
    return done / (time.perf_counter() - started)


async def main(rounds: int, groups: int, width: int) -> dict[str, Any]:
    settings = Settings.from_env()
    engine = create_engine(settings.database_url)
    total, edges = groups * width, groups * (width - 1)
    runs: list[dict[str, float]] = []
    async with open_ledger(replace(settings), "measure-dependencies", check=False) as ledger:
        for _ in range(rounds):
            rates = {}
            for graph in (False, True):
                backlog(engine, groups, width, graph)
                rates["graph" if graph else "plain"] = await drain(ledger, engine, total)
            extra = total / rates["graph"] - total / rates["plain"]
            runs.append(
                {
                    "plain_per_s": round(rates["plain"]),
                    "graph_per_s": round(rates["graph"]),
                    "ratio": round(rates["graph"] / rates["plain"], 3),
                    "extra_us_per_edge": round(extra / edges * 1e6, 1),
                }
            )
    engine.dispose()
    return {"groups": groups, "width": width, "edges": edges, "runs": runs}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--groups", type=int, default=100)
    parser.add_argument("--width", type=int, default=100)
    parser.add_argument("--cost", action="store_true", help="in PostgreSQL alone (see above)")
    args = parser.parse_args()
    if args.cost:
        print(json.dumps(cost(Settings.from_env().database_url, args.rounds), indent=2))
    else:
        print(json.dumps(asyncio.run(main(args.rounds, args.groups, args.width)), indent=2))
