"""The idle latency of a ``ledgerq worker --direct`` on MySQL / MariaDB, by poll interval.

Usage: python scripts/measure_idle_mysql.py [--tasks 30] [--polls 1.0,0.1]

Runs against ``LEDGERQ_DATABASE_URL`` (a MariaDB or MySQL URL of a scratch
database, migrated: its tasks are deleted). For each poll interval, in the
order given and then reversed (A B B A), one idle worker
(``ledgerq worker --direct --app ledgerq.demo.app --direct-poll P``) is started,
and TASKS ``demo.noop`` tasks are enqueued one at a time, each in its own
committed transaction, 0.3 to 0.9 s apart (a random gap, so the commits fall
anywhere in the poll's cycle). The latency of a task is the time from its insert
to its claim, both on the database's clock (``created_at``, ``started_at``).
MySQL has no LISTEN, so the poll is the only wake-up: the expected median is
about half the interval, plus the claim.

Prints one JSON object: per interval, the median, p90 and worst latency in ms over
its runs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

from sqlalchemy import Engine, bindparam, create_engine, text
from sqlalchemy.orm import Session

from ledgerq import enqueue

#: Each task's wait, insert to claim, on the database's clock (microseconds).
LATENCY = text(
    "SELECT TIMESTAMPDIFF(MICROSECOND, created_at, started_at) FROM ledgerq_history"
    " WHERE id IN :ids"
).bindparams(bindparam("ids", expanding=True))


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def _count(engine: Engine, sql: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(text(sql)).scalar() or 0)


def one_run(url: str, poll_s: float, tasks: int) -> list[float]:
    """The latencies (ms) of ``tasks`` tasks enqueued one at a time to an idle worker."""
    engine = create_engine(url, pool_size=1)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM ledgerq_tasks"))
        conn.execute(text("DELETE FROM ledgerq_history"))
        conn.execute(text("DELETE FROM ledgerq_subscriptions"))  # the last run's worker
    worker = subprocess.Popen(
        [sys.executable, "-m", "ledgerq", "worker", "--direct", "--app", "ledgerq.demo.app",
         "--direct-poll", str(poll_s)],
        env={**os.environ, "LEDGERQ_DATABASE_URL": url},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait(lambda: _count(engine, "SELECT COUNT(*) FROM ledgerq_subscriptions") > 0, "a worker")
        ids = []
        for _ in range(tasks):
            time.sleep(random.uniform(0.3, 0.9))  # a commit anywhere in the poll's cycle
            with Session(engine) as session, session.begin():
                ids.append(enqueue(session, "demo.noop", {}))

        def latencies() -> list[float]:
            with engine.connect() as conn:  # a new snapshot per look (REPEATABLE READ)
                return [float(r[0]) / 1000 for r in conn.execute(LATENCY, {"ids": ids})]

        _wait(lambda: len(latencies()) == tasks, "the tasks to end")
        return latencies()
    finally:
        worker.terminate()
        worker.wait(30)
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=30)
    parser.add_argument("--polls", default="1.0,0.1", help="poll intervals, comma-separated")
    args = parser.parse_args()
    url = os.environ["LEDGERQ_DATABASE_URL"]
    polls = [float(p) for p in args.polls.split(",")]
    latencies: dict[float, list[float]] = {p: [] for p in polls}
    for poll_s in [*polls, *reversed(polls)]:
        latencies[poll_s] += one_run(url, poll_s, args.tasks)
    report = {}
    for poll_s, values in latencies.items():
        ordered = sorted(values)
        report[f"{poll_s:g}"] = {
            "tasks": len(ordered),
            "p50_ms": round(statistics.median(ordered), 1),
            "p90_ms": round(ordered[int(0.9 * (len(ordered) - 1))], 1),
            "max_ms": round(ordered[-1], 1),
        }
    print(json.dumps({"url_dialect": url.split(":", 1)[0], "polls": report}, indent=2))


if __name__ == "__main__":
    main()
