"""What one task costs each part of the pipeline on this machine (docs/scaling.md).

Usage: python scripts/measure_costs.py [TASKS] [--out docs/capacity/costs.json]

Everything runs on servers of its own, so nothing else on the machine is
counted: a private PostgreSQL cluster (initdb, as in the TLS tests) and a private
RabbitMQ node (tests/rabbit.py). Two phases, each over TASKS no-op tasks:

1. enqueue: this process inserts the tasks in transactions of 100 with the relay
   stopped (the producer's CPU, PostgreSQL's CPU and the WAL it writes);
2. drain: ``ledgerq relay`` and ``ledgerq worker --app ledgerq.demo.app`` as
   processes, until every task has succeeded: the CPU seconds of the relay, the
   worker, their PostgreSQL backends (told apart by application_name), the rest
   of PostgreSQL (WAL writer, checkpointer, autovacuum...), the RabbitMQ node,
   and the WAL written.

CPU is read from /proc (user + system time), so a second task on the machine
slows a phase down but does not change what it costs. The output is JSON, per
task, which scripts/capacity_model.py reads.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
from sqlalchemy.orm import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ledgerq import TaskSpec, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import sync_engine
from ledgerq.ledger.pg.migrate import upgrade
from tests.pki import free_port
from tests.rabbit import RabbitNode, as_user, chown, workdir

PG_BIN = Path("/usr/lib/postgresql") / sorted(os.listdir("/usr/lib/postgresql"))[-1] / "bin"
TICK = os.sysconf("SC_CLK_TCK")
#: Seconds the relay and the worker get to start before the tasks fall due.
BOOT_S = 8.0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of one process (0 if it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return 0.0
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def children(parent: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == parent:
                found.append(int(entry.name))
    return found


class PrivatePostgres:
    def __init__(self, home: Path) -> None:
        self.home, self.data, self.port = home, home / "data", free_port()

    def start(self) -> PrivatePostgres:
        self.home.mkdir(parents=True, exist_ok=True)
        chown(self.home, "postgres")
        user = as_user("postgres")
        subprocess.run(
            [*user, str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A",
             "trust", "--no-sync"], check=True, capture_output=True,
        )  # fmt: skip
        options = f"-p {self.port} -k {self.home} -c listen_addresses=127.0.0.1"
        subprocess.run(
            [*user, str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-l", str(self.home / "log"),
             "-w", "-o", options, "start"], check=True, capture_output=True,
        )  # fmt: skip
        return self

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/ledgerq"

    def postmaster(self) -> int:
        return int((self.data / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        subprocess.run(
            [*as_user("postgres"), str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast",
             "-w", "stop"], capture_output=True, check=False,
        )  # fmt: skip


class Sample:
    """CPU seconds of every PostgreSQL process by role, the node's, and the WAL position."""

    def __init__(self, pg: PrivatePostgres, node: RabbitNode, procs: dict[str, int]) -> None:
        with psycopg.connect(pg.url.replace("+psycopg", ""), autocommit=True) as conn:
            names = dict(
                conn.execute("SELECT pid, application_name FROM pg_stat_activity").fetchall()
            )
            self.wal = int(
                conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()[0]  # type: ignore[index]
            )
        postmaster = pg.postmaster()
        self.cpu: dict[str, float] = {}
        for pid in [postmaster, *children(postmaster)]:
            app = names.get(pid) or ""
            role = "pg_" + app.removeprefix("ledgerq-") if app.startswith("ledgerq-") else "pg_rest"
            self.cpu[role] = self.cpu.get(role, 0.0) + cpu_s(pid)
        self.cpu["broker"] = cpu_s(int((node.home / "pid").read_text().strip()))
        for role, pid in procs.items():
            self.cpu[role] = cpu_s(pid)
        if not procs:  # the enqueue phase: this process is the producer
            self.cpu["producer"] = cpu_s(os.getpid())
        self.at = time.monotonic()

    def per_task(self, before: Sample, tasks: int) -> dict[str, float]:
        costs = {
            f"{role}_cpu_ms": round(1000 * (now - before.cpu.get(role, 0.0)) / tasks, 4)
            for role, now in sorted(self.cpu.items())
        }
        costs["wal_bytes"] = round((self.wal - before.wal) / tasks, 1)
        costs["tasks_per_s"] = round(tasks / (self.at - before.at), 1)
        return costs


def run(tasks: int) -> dict[str, Any]:
    home = workdir("ledgerq-costs-")
    pg, node = PrivatePostgres(home / "pg"), RabbitNode(home / "rabbitmq")
    procs: list[subprocess.Popen[bytes]] = []
    try:
        pg.start()
        node.start()
        settings = Settings(database_url=pg.url, amqp_url=node.url)
        upgrade(settings)
        engine = sync_engine(settings, "ledgerq-producer", pool_size=1)
        # Due a while from now: the relay and the worker have started by then, so
        # the drain's rate is the pipeline's and not the processes' start-up.
        due = datetime.now(UTC) + timedelta(seconds=BOOT_S + tasks / 5000)
        before = Sample(pg, node, {})
        for start in range(0, tasks, 100):
            batch = [TaskSpec("demo.noop", {"n": n}, run_at=due) for n in range(start, start + 100)]
            with Session(engine) as session, session.begin():
                enqueue_many(session, batch)
        enqueued = Sample(pg, node, {})
        engine.dispose()
        env = dict(os.environ, LEDGERQ_DATABASE_URL=pg.url, LEDGERQ_AMQP_URL=node.url)
        for args in (("relay",), ("worker", "--app", "ledgerq.demo.app", "--concurrency", "100")):
            procs.append(
                subprocess.Popen([sys.executable, "-m", "ledgerq", *args], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            )  # fmt: skip
        roles = {"relay": procs[0].pid, "worker": procs[1].pid}
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()))
        start_drain = Sample(pg, node, roles)
        with psycopg.connect(pg.url.replace("+psycopg", ""), autocommit=True) as conn:
            while conn.execute("SELECT count(*) FROM ledgerq_tasks").fetchone()[0]:  # type: ignore[index]
                time.sleep(0.2)
        drained = Sample(pg, node, roles)
        return {
            "tasks": tasks,
            "handler": "demo.noop (async, no database work of its own)",
            "enqueue": enqueued.per_task(before, tasks),
            "drain": drained.per_task(start_drain, tasks),
            "machine": {"cpus": os.cpu_count(), "python": sys.version.split()[0]},
        }
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=60)
        node.stop()
        pg.stop()
        shutil.rmtree(home, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", nargs="?", type=int, default=20_000)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = run(args.tasks)
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    tempfile.tempdir = None
    main()
