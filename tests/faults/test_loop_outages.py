"""Long-running loops live through a lost database (issue 28, item 1).

``ledgerq reconcile --every 1`` and a worker's periodic enqueuer run as real
processes. Their PostgreSQL backends are terminated between passes, in the
middle of a pass (the pass held on a table lock and found by its
``application_name`` in ``pg_stat_activity``), and all at once while the
database refuses new connections for a few seconds: a PostgreSQL restart as
the processes see it. (The fault suite has no PostgreSQL of its own to
restart, and the machine's shared server is never restarted; the refusal is
``ALTER DATABASE ... ALLOW_CONNECTIONS false`` on the suite's own database.)

Each process must keep running, log one line per outage (not one per attempt),
and go on doing its job afterwards: an expired lease is rescued, the next
period is enqueued. SIGTERM still ends each with exit 0. Only a lost schema
ends the loop: one line, exit 78.
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.outages import database_down
from tests.harness import db, enqueue_committed
from tests.support import ledgerq_env, until

#: What the loops log (ledger/outages.py): once when an outage begins, once when it ends.
RECONCILER_DOWN = "reconciler pass failed ("
RECONCILER_BACK = "reconciler pass works again after"
PERIODIC_DOWN = "periodic enqueue failed ("
RELAY_DOWN = "relay batch failed ("
#: The report line of each reconciler pass.
PASS = "reconcile: took back"


@dataclass
class Service:
    """A ``ledgerq`` process, its output in a file."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def count(self, marker: str) -> int:
        return self.text().count(marker)

    def alive(self) -> bool:
        return self.proc.poll() is None


StartService = Callable[..., Service]


@pytest.fixture
async def start(settings: Settings, tmp_path: Path) -> AsyncIterator[StartService]:
    """Start ``ledgerq -v ARGS`` processes; each is stopped (SIGTERM, then SIGKILL)
    afterwards, and a SIGTERM must end it with exit 0."""
    services: list[Service] = []

    def start(name: str, *args: str) -> Service:
        log = tmp_path / f"{name}.log"
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ledgerq", "-v", *args],
                env=ledgerq_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        services.append(Service(name, proc, log))
        return services[-1]

    yield start
    codes = {}
    for service in services:
        if not service.alive():
            continue  # it ended on its own: the test looked at its exit
        service.proc.send_signal(signal.SIGTERM)
        try:
            codes[service.name] = await asyncio.to_thread(service.proc.wait, 30)
        except subprocess.TimeoutExpired:
            service.proc.kill()
            codes[service.name] = service.proc.wait()
    assert set(codes.values()) <= {0}, {s.name: s.text()[-3000:] for s in services}


def terminate(settings: Settings, application: str, *, only_idle: bool = False) -> int:
    """pg_terminate_backend on this database's backends named ``application`` (a LIKE
    pattern); ``only_idle``: those between two statements only. Never the test's own."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND application_name LIKE %s AND application_name NOT LIKE 'ledgerq-test%%' "
            "AND (NOT %s OR state = 'idle')",
            (application, only_idle),
        ).fetchall()
    return sum(1 for r in rows if r[0])


async def expired_lease(settings: Settings, ledger: PgLedger, worker: str) -> int:
    """A task claimed by a worker that is gone at once (its lease runs out in 50 ms);
    with one attempt allowed, the reconciler's rescue ends it ``dead``."""
    [task_id] = enqueue_committed(settings, [TaskSpec("loop.lost", {}, max_attempts=1)])
    assert await ledger.claim([(task_id, 0)], worker, lease_s=0.05)
    return task_id


async def rescued(ledger: PgLedger, task_id: int) -> bool:
    return (await ledger.whereabouts([task_id])).get(task_id) == "dead"


def periods(settings: Settings, kind: str = "loop.tick") -> list[datetime]:
    """The starts of the periods of ``kind`` enqueued so far (live or finished)."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT business_key FROM ledgerq_tasks WHERE kind = %s "
            "UNION ALL SELECT business_key FROM ledgerq_history WHERE kind = %s",
            (kind, kind),
        ).fetchall()
    return sorted(datetime.fromisoformat(str(r[0]).removeprefix("periodic:")) for r in rows)


def ran_since(settings: Settings, since: datetime, kind: str = "loop.tick") -> bool:
    """Whether a task of ``kind`` for a period that began after ``since`` succeeded."""
    with db(settings) as conn:
        rows = conn.execute(
            "SELECT business_key FROM ledgerq_history WHERE kind = %s AND status = 'succeeded'",
            (kind,),
        ).fetchall()
    return any(datetime.fromisoformat(str(r[0]).removeprefix("periodic:")) > since for r in rows)


async def test_reconcile_loop_lives_through_backends_killed_between_and_during_passes(
    settings: Settings, ledger: PgLedger, start: StartService
) -> None:
    reconciler = start("reconciler", "reconcile", "--every", "1")
    await until("a first pass", lambda: reconciler.count(PASS) >= 1)

    # Between passes: its pooled connections are idle, and die there.
    passes = reconciler.count(PASS)
    await until("the next pass", lambda: reconciler.count(PASS) > passes)
    assert terminate(settings, "ledgerq-reconciler%", only_idle=True) >= 1
    lost = await expired_lease(settings, ledger, "gone:between")
    await until("the lease rescued", lambda: rescued(ledger, lost))
    assert reconciler.alive(), reconciler.text()[-3000:]
    await until("the outage over", lambda: reconciler.count(RECONCILER_BACK) == 1)

    # During a pass: the pass waits on a table lock the test holds; its backends
    # (the waiting statement's and the advisory lock's session) are terminated there.
    with db(settings) as locker:
        locker.execute("BEGIN")
        locker.execute("LOCK TABLE ledgerq_tasks IN ACCESS EXCLUSIVE MODE")
        with db(settings) as watcher:

            def waiting() -> bool:
                row = watcher.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND application_name = 'ledgerq-reconciler' AND wait_event_type = 'Lock'"
                ).fetchone()
                return bool(row and row[0])

            await until("a pass waiting on the lock", waiting)
            assert terminate(settings, "ledgerq-reconciler%") >= 2  # statement and lock session
        locker.execute("ROLLBACK")
    lost = await expired_lease(settings, ledger, "gone:during")
    await until("the lease rescued", lambda: rescued(ledger, lost))
    assert reconciler.alive(), reconciler.text()[-3000:]
    await until("the outage over", lambda: reconciler.count(RECONCILER_BACK) == 2)

    # One line when each outage began, whatever the attempts it took.
    assert reconciler.count(RECONCILER_DOWN) == 2, reconciler.text()[-3000:]
    assert "Traceback" not in reconciler.text()


async def test_every_loop_lives_through_a_database_restart(
    settings: Settings, ledger: PgLedger, start: StartService
) -> None:
    """The reconciler's loop, a worker's periodic enqueuer, and the relay beside them."""
    reconciler = start("reconciler", "reconcile", "--every", "1")
    worker = start(
        "worker",
        *("worker", "--app", "tests.apps.periodic_app", "--concurrency", "2"),
        *("--db-pool", "2", "--grace", "2"),
    )
    relay = start("relay", "relay")
    await until("a first pass", lambda: reconciler.count(PASS) >= 1)
    await until("the worker consuming", lambda: " consuming " in worker.text())
    await until("the relay running", lambda: "relay running" in relay.text())
    await until("a first period enqueued", lambda: len(periods(settings)) >= 1)

    with database_down(settings):
        began = time.monotonic()
        # The outage lasts until every loop has met it, and at least 2 s.
        await until(
            "every loop failing",
            lambda: (
                RECONCILER_DOWN in reconciler.text()
                and PERIODIC_DOWN in worker.text()
                and RELAY_DOWN in relay.text()
                and time.monotonic() - began >= 2.0
            ),
        )
    back = datetime.now(UTC)

    lost = await expired_lease(settings, ledger, "gone:restart")
    await until("the lease rescued", lambda: rescued(ledger, lost))
    await until("a period enqueued after the outage", lambda: periods(settings)[-1] > back)
    # ... and run: the relay publishes it, the worker runs it.
    await until("a period run after the outage", lambda: ran_since(settings, back))
    for service in (reconciler, worker, relay):
        assert service.alive(), service.text()[-3000:]
        assert "Traceback" not in service.text(), service.text()[-3000:]
    await until("the reconciler's outage over", lambda: RECONCILER_BACK in reconciler.text())
    assert reconciler.count(RECONCILER_DOWN) == 1, reconciler.text()[-3000:]
    # The other loops log each outage they meet once too (a connection that died
    # idle in a pool and is used only after the outage may make one meet a second).
    assert 1 <= worker.count(PERIODIC_DOWN) <= 2, worker.text()[-3000:]
    assert 1 <= relay.count(RELAY_DOWN) <= 2, relay.text()[-3000:]


async def test_reconcile_loop_ends_on_a_lost_schema_with_one_line(
    settings: Settings, start: StartService
) -> None:
    """What retrying cannot fix ends the loop: the hot table gone (renamed away for
    a moment, and back whatever happens) stops it with one line and exit 78."""
    reconciler = start("reconciler", "reconcile", "--every", "1")
    await until("a first pass", lambda: reconciler.count(PASS) >= 1)
    with db(settings) as conn:
        conn.execute("ALTER TABLE ledgerq_tasks RENAME TO ledgerq_tasks_away")
        try:
            code = await asyncio.to_thread(reconciler.proc.wait, 30)
        finally:
            conn.execute("ALTER TABLE ledgerq_tasks_away RENAME TO ledgerq_tasks")
    output = reconciler.text()
    assert code == 78, output[-3000:]  # EX_CONFIG
    last = output.strip().splitlines()[-1]
    assert last.startswith('ledgerq: relation "ledgerq_tasks" does not exist'), output[-3000:]
    assert last.endswith("run `ledgerq migrate`"), output[-3000:]
    assert "Traceback" not in output and RECONCILER_DOWN not in output
