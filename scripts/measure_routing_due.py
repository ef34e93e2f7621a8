#!/usr/bin/env python3
"""The relay's ``select_due`` before routing (a git revision's) and now, alternating.

Fills the ledger of ``--dsn`` (a migrated, disposable database: it is truncated)
with a 20,000-task backlog of 4 kinds and 4 shards, then runs both statements
30 times each in rolled-back transactions with the relay's planner settings,
for three subscription set-ups, and prints the median ms per batch of 500
(docs/performance.md, "Routing on the relay's hot path").
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import time
from pathlib import Path

import psycopg

from ledgerq.ledger.sql import parse

ROOT = Path(__file__).resolve().parent.parent
FILL = """
INSERT INTO ledgerq_tasks (kind, queue, payload, priority, shard, run_at, status,
                           max_attempts, retry)
SELECT 'k' || (g % 4), 'default', '{}', g % 10, g % 4, now() - interval '1 s', 'pending', 5, '{}'
FROM generate_series(1, 20000) g
"""
CASES = {
    "no subscription": "SELECT 1",
    "one whole-queue worker": "INSERT INTO ledgerq_subscriptions (worker, queue, expires_at) "
    "VALUES ('w1', 'default', now() + interval '1 h')",
    "--kinds k0,k1 worker only": "INSERT INTO ledgerq_subscriptions "
    "(worker, queue, kinds, route, expires_at) "
    "VALUES ('w2', 'default', '{k0,k1}', 'r-x', now() + interval '1 h')",
}


def _pyformat(sql: str) -> str:
    return re.sub(r"(?<!:):([a-z_]+)", r"%(\1)s", sql)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dsn", required=True, help="libpq DSN of a migrated scratch database")
    parser.add_argument("--base", default="main", help="git revision of the 'before' statement")
    args = parser.parse_args()
    before_sql = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{args.base}:ledgerq/ledger/queries.sql"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    statements = {
        "before": _pyformat(parse(before_sql)["select_due"]),
        "after": _pyformat(parse((ROOT / "ledgerq/ledger/queries.sql").read_text())["select_due"]),
    }
    params = {"limit": 500, "aging_s": 300.0}
    with psycopg.connect(args.dsn, autocommit=True, options="-c jit=off -c enable_sort=off") as db:
        db.execute("TRUNCATE ledgerq_tasks, ledgerq_subscriptions")
        db.execute(FILL)
        db.execute("ANALYZE ledgerq_tasks")
        for name, setup in CASES.items():
            db.execute("DELETE FROM ledgerq_subscriptions")
            db.execute(setup)
            times: dict[str, list[float]] = {"before": [], "after": []}
            for i in range(30):
                order = ("before", "after") if i % 2 == 0 else ("after", "before")
                for label in order:
                    with db.transaction(force_rollback=True):
                        started = time.perf_counter()
                        db.execute(statements[label], params).fetchall()
                        times[label].append((time.perf_counter() - started) * 1000)
            before, after = (statistics.median(times[k]) for k in ("before", "after"))
            print(f"{name}: before {before:.2f} ms, after {after:.2f} ms, x{after / before:.2f}")
        db.execute("TRUNCATE ledgerq_tasks, ledgerq_subscriptions")


if __name__ == "__main__":
    main()
