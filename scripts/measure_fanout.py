"""Fan-out figures on this machine: children per second and the callback's delay.

Usage: python scripts/measure_fanout.py [--children 2000] [--workers 2] [--repeat 3]

Runs against the ledger and broker the environment names (``LEDGERQ_DATABASE_URL``,
``LEDGERQ_AMQP_URL``, ``LEDGERQ_AMQP_PREFIX``): use a scratch database, the
ledger is truncated once, before the workers start (they then write their kinds'
``on_children_done`` into it). It starts ``ledgerq relay`` and WORKERS
``ledgerq worker --app tests.apps.fanout_app`` processes, then, REPEAT times,
enqueues one ``fan.parent`` that spawns CHILDREN no-op ``fan.child`` tasks
(through ``ctx.session``, in its one transaction) and waits for its
``fan.done`` callback to succeed. From the ledger's own timestamps (one clock;
each is its transaction's ``now()``, so a parent's spawns all carry the time its
transaction began and cannot be timed apart):

- children_per_s: CHILDREN over the time from the parent's claim to the last
  child's end (the spawning, the parent's commit, and the children's drain);
- callback_s: seconds from the last child's end to the callback's end (its
  enqueue by the history trigger, publication by the relay, run and finish).

Prints one JSON object with every run and the medians.

``--cost`` measures instead what the two triggers of migration 0010 cost tasks
that are not in a family, in PostgreSQL (where they run): ROUNDS rounds, in A B
B A order, each timing STATEMENTS statements of 100 rows (the finisher's batch
size) with the triggers enabled (B) and disabled (A, ``ALTER TABLE ... DISABLE
TRIGGER``, as on the code before): an insert of 100 tasks without a parent
into ``ledgerq_tasks`` (the producer's batch), and a move of those 100 rows to
history as ``succeeded`` (the shape of ``finish``). Run it on a scratch database
with no open family.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledgerq import TaskSpec
from ledgerq.compose import open_ledger
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import upgrade
from tests.apps.fanout_app import CALLBACKS_DDL
from tests.harness import enqueue_committed

FIGURES = """
SELECT p.started_at,
       (SELECT max(finished_at) FROM ledgerq_history WHERE parent_id = p.id) AS last_child,
       (SELECT count(*) FROM ledgerq_history WHERE parent_id = p.id) AS children,
       c.finished_at AS callback_end
FROM ledgerq_history p
JOIN ledgerq_families f ON f.parent_id = p.id
JOIN ledgerq_history c ON c.id = f.callback_id AND c.status = 'succeeded'
WHERE p.id = %s
"""


def processes(settings: Settings, workers: int, log: Path) -> list[subprocess.Popen[bytes]]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    env.update(
        LEDGERQ_DATABASE_URL=settings.database_url,
        LEDGERQ_AMQP_URL=settings.amqp_url,
        LEDGERQ_AMQP_PREFIX=settings.amqp_prefix,
    )
    commands = [["relay", "--poll-interval", "0.2"]] + [
        ["worker", "--app", "tests.apps.fanout_app"] for _ in range(workers)
    ]
    with log.open("ab") as out:
        return [
            subprocess.Popen([sys.executable, "-m", "ledgerq", *c], env=env, stdout=out, stderr=out)
            for c in commands
        ]


async def truncate(settings: Settings) -> None:
    async with open_ledger(settings, "ledgerq-measure-fanout", pool_size=1) as ledger:
        await ledger.truncate()


def one_run(settings: Settings, children: int, timeout: float = 600) -> dict[str, float]:
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute("DROP TABLE IF EXISTS fanout_callbacks")
        conn.execute(CALLBACKS_DDL)
        [parent] = enqueue_committed(settings, [TaskSpec("fan.parent", {"n": children})])
        deadline = time.monotonic() + timeout
        while (row := conn.execute(FIGURES, (parent,)).fetchone()) is None:
            if time.monotonic() > deadline:
                raise SystemExit(f"no callback after {timeout} s")
            time.sleep(0.2)
    started, last_child, count, callback_end = row
    assert count == children, (count, children)
    family_s = (last_child - started).total_seconds()
    return {
        "children_per_s": round(children / family_s, 1),
        "callback_s": round((callback_end - last_child).total_seconds(), 4),
    }


COST_INSERT = """
INSERT INTO ledgerq_tasks (kind, status, payload)
SELECT 'cost.noop', 'pending', '{}'::jsonb FROM generate_series(1, 100)
"""
COST_FINISH = """
WITH ended AS (
    DELETE FROM ledgerq_tasks WHERE id IN (
        SELECT id FROM ledgerq_tasks WHERE kind = 'cost.noop' ORDER BY id LIMIT 100)
    RETURNING *
)
INSERT INTO ledgerq_history (id, kind, queue, payload, priority, shard, run_at, status,
                             attempts, max_attempts, epoch, publishes, created_at,
                             finished_at, suspect)
SELECT id, kind, queue, payload, priority, shard, run_at, 'succeeded', 1, max_attempts,
       epoch, publishes, created_at, now(), false
FROM ended
"""
SWITCH = {
    "A": (
        "ALTER TABLE ledgerq_tasks DISABLE TRIGGER ledgerq_tasks_child",
        "ALTER TABLE ledgerq_history DISABLE TRIGGER ledgerq_history_family",
    ),
    "B": (
        "ALTER TABLE ledgerq_tasks ENABLE TRIGGER ledgerq_tasks_child",
        "ALTER TABLE ledgerq_history ENABLE TRIGGER ledgerq_history_family",
    ),
}


def cost(settings: Settings, statements: int, rounds: int) -> dict[str, Any]:
    """Milliseconds per 100-row statement, triggers on (B) and off (A), A B B A."""
    times: dict[str, dict[str, list[float]]] = {side: {"insert": [], "finish": []} for side in "AB"}
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        for side in "ABBA" * rounds:
            for statement in SWITCH[side]:
                conn.execute(statement)
            for part, sql in (("insert", COST_INSERT), ("finish", COST_FINISH)):
                started = time.perf_counter()
                for _ in range(statements):
                    conn.execute(sql)
                times[side][part].append(1000 * (time.perf_counter() - started) / statements)
        for statement in SWITCH["B"]:
            conn.execute(statement)
    medians = {
        side: {part: round(statistics.median(v), 3) for part, v in parts.items()}
        for side, parts in times.items()
    }
    ratio = {p: round(medians["B"][p] / medians["A"][p], 3) for p in ("insert", "finish")}
    return {"ms_per_100_rows": medians, "on_over_off": ratio, "runs": times}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--children", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--log", type=Path, default=Path("measure_fanout.log"))
    parser.add_argument("--cost", action="store_true", help="the triggers' cost instead")
    parser.add_argument("--statements", type=int, default=200)
    args = parser.parse_args()
    settings = Settings.from_env()
    upgrade(settings)
    if args.cost:
        print(json.dumps(cost(settings, args.statements, args.repeat), indent=2))
        return
    asyncio.run(truncate(settings))
    procs = processes(settings, args.workers, args.log)
    try:
        time.sleep(6)  # the relay and workers connect and declare
        runs = [one_run(settings, args.children) for _ in range(args.repeat)]
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(60)
    medians: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(json.dumps({"children": args.children, "workers": args.workers, "runs": runs,
                      "median": medians}, indent=2))  # fmt: skip


if __name__ == "__main__":
    main()
