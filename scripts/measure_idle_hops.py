"""The idle latency, hop by hop, from the ledger's own timestamps (docs/performance.md).

Usage: python scripts/measure_idle_hops.py [TASKS] [RATE] [--database NAME] [--prefix P]

Starts ``ledgerq relay`` and one ``ledgerq worker --app ledgerq.demo.app`` on a
database of its own (dropped and created: default ``ledgerq_hops``) and an AMQP
prefix of its own, enqueues TASKS no-op tasks (default 150) at RATE per second
(default 20), one per transaction, and prints, as JSON, the p50 and p99 in ms of:

* ``commit->pub``: the producer's commit returned -> the relay's mark
  (``published_at`` is ``clock_timestamp()`` in the mark, after the pick);
* ``pub->start``: the mark -> the claim (``started_at``, ``clock_timestamp()`` in
  the claim statement): the relay's commit, the publish, RabbitMQ, the delivery;
* ``start->finish``: the claim -> the finish (a no-op handler);
* ``commit->start``, ``commit->finish``: the totals.

The commit time is the producer's wall clock after its COMMIT returned; every
process runs on this machine, so one clock serves. Run it for two trees (each
with ``PYTHONPATH=<tree>``) alternately for a before/after.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import psycopg
from sqlalchemy import create_engine
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledgerq import enqueue

HOPS = {
    "commit->pub": lambda at, pub, start, end: pub - at,
    "pub->start": lambda at, pub, start, end: start - pub,
    "start->finish": lambda at, pub, start, end: end - start,
    "commit->start": lambda at, pub, start, end: start - at,
    "commit->finish": lambda at, pub, start, end: end - at,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", type=int, nargs="?", default=150)
    parser.add_argument("rate", type=float, nargs="?", default=20.0)
    parser.add_argument("--database", default="ledgerq_hops")
    parser.add_argument("--prefix", default="ledgerq-hops")
    args = parser.parse_args()
    admin = psycopg.connect("host=127.0.0.1 user=postgres dbname=postgres", autocommit=True)
    admin.execute(f'DROP DATABASE IF EXISTS "{args.database}"')
    admin.execute(f'CREATE DATABASE "{args.database}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{args.database}"
    env = dict(os.environ, LEDGERQ_DATABASE_URL=url, LEDGERQ_AMQP_PREFIX=args.prefix)
    ledgerq = [sys.executable, "-m", "ledgerq"]
    subprocess.run([*ledgerq, "migrate"], env=env, check=True, capture_output=True)
    procs = [
        subprocess.Popen(
            [*ledgerq, "worker", "--app", "ledgerq.demo.app", "--concurrency", "100"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        ),
        subprocess.Popen([*ledgerq, "relay"], env=env, stderr=subprocess.DEVNULL),
    ]
    engine = create_engine(url)
    ledger = psycopg.connect(f"host=127.0.0.1 user=postgres dbname={args.database}")
    ledger.autocommit = True
    try:
        # One task through the path first: the processes start meanwhile.
        with Session(engine) as session, session.begin():
            warm = enqueue(session, "demo.noop", {"warm_up": True})
        wait_finished(ledger, [warm], 120.0)
        commits: dict[int, float] = {}
        next_at = time.perf_counter()
        for i in range(args.tasks):
            with Session(engine) as session, session.begin():
                task_id = enqueue(session, "demo.noop", {"probe": i})
            commits[task_id] = time.time()
            next_at += 1 / args.rate
            time.sleep(max(0.0, next_at - time.perf_counter()))
        wait_finished(ledger, list(commits), 120.0)
        rows = ledger.execute(
            "SELECT id, extract(epoch FROM published_at)::float8,"
            " extract(epoch FROM started_at)::float8, extract(epoch FROM finished_at)::float8"
            " FROM ledgerq_history WHERE id = ANY(%s)",
            (list(commits),),
        ).fetchall()
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(30)
    out = {}
    for name, hop in HOPS.items():
        ms = sorted(1000 * hop(commits[i], pub, start, end) for i, pub, start, end in rows)
        p99 = ms[-1 - len(ms) // 100]
        out[name] = {"p50": round(statistics.median(ms), 2), "p99": round(p99, 2)}
    print(json.dumps(out))


def wait_finished(conn: psycopg.Connection[tuple[int]], ids: list[int], timeout: float) -> None:
    """Until every task of ``ids`` is in history (polled: this script measures, it is no test)."""
    end = time.monotonic() + timeout
    query = "SELECT count(*) FROM ledgerq_history WHERE id = ANY(%s)"
    while (row := conn.execute(query, (ids,)).fetchone()) is None or row[0] < len(ids):
        if time.monotonic() > end:
            raise SystemExit(f"timed out waiting for {len(ids)} tasks")
        time.sleep(0.05)


if __name__ == "__main__":
    main()
