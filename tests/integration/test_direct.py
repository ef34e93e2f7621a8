"""The ledger-direct path (``ledgerq worker --direct``) on the real ledger, no broker.

* ``claim_due`` honours what the relay's due selection honours: priority
  order, the worker's queues, pauses, run_at; and its fence makes a message
  published for the old epoch claim nothing;
* several ``ledgerq worker --direct`` processes, with the broker URL pointing
  at a closed port, drain a backlog and tasks enqueued while they run, each
  task exactly once (one attempt, one history row).
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace

import psycopg
import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from tests.harness import enqueue_committed
from tests.support import ledgerq, spawn

WORKER = "direct-test"


async def test_claim_due_takes_priorities_first_and_only_its_queues(ledger: PgLedger) -> None:
    settings_less = [
        TaskSpec("demo.noop", {"i": i}, priority=p, queue=q)
        for i, (p, q) in enumerate([(0, "default"), (5, "default"), (9, "other"), (3, "default")])
    ]
    low, high, elsewhere, middle = await ledger.enqueue(settings_less)
    won = await ledger.claim_due(["default"], 2, WORKER, 30.0)
    assert [t.id for t in won] == [high, middle]
    assert all(t.attempts == 1 for t in won)
    rest = await ledger.claim_due(["default"], 10, WORKER, 30.0)
    assert [t.id for t in rest] == [low]  # the other queue's task is not ours
    assert [t.id for t in await ledger.claim_due(["other"], 10, WORKER, 30.0)] == [elsewhere]


async def test_claim_due_honours_pauses_and_run_at(ledger: PgLedger) -> None:
    [later] = await ledger.enqueue([TaskSpec("demo.noop", delay=3600)])
    [paused] = await ledger.enqueue([TaskSpec("demo.noop", queue="held")])
    await ledger.pause("queue", "held", actor="test")
    assert await ledger.claim_due(["default", "held"], 10, WORKER, 30.0) == []
    await ledger.resume("queue", "held", actor="test")
    assert [t.id for t in await ledger.claim_due(["default", "held"], 10, WORKER, 30.0)] == [paused]
    assert later not in {t.id for t in await ledger.claim_due(["default"], 10, WORKER, 30.0)}


async def test_a_message_for_a_directly_claimed_row_claims_nothing(ledger: PgLedger) -> None:
    """The relay published (id, epoch) and died before marking it; the worker then
    claimed the row directly: the delivery, when it comes, is stale."""
    [task_id] = await ledger.enqueue([TaskSpec("demo.noop")])
    [won] = await ledger.claim_due(["default"], 10, WORKER, 30.0)
    assert (won.id, won.epoch) == (task_id, 1)
    assert await ledger.claim([(task_id, 0)], "consumer", 30.0) == []  # the old epoch


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again once this block ends


def _history(settings: Settings) -> list[tuple[int, str, int]]:
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        rows = conn.execute("SELECT id, status, attempts FROM ledgerq_history").fetchall()
    return [(int(r[0]), str(r[1]), int(r[2])) for r in rows]


def _direct_claimers(settings: Settings) -> int:
    """Workers whose direct claims have begun (each holds one claims connection), so
    past their start-up: a SIGTERM then finds their stop handler installed."""
    with psycopg.connect(libpq_url(settings.database_url)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE application_name LIKE 'ledgerq-worker-direct%' "
            "AND datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def _until(ready: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, f"not ready after {timeout} s: {what}"
        time.sleep(0.1)


def test_direct_workers_drain_exactly_once_without_a_broker(settings: Settings) -> None:
    settings = replace(settings, amqp_url=f"amqp://guest:guest@127.0.0.1:{_closed_port()}/")
    backlog = enqueue_committed(settings, [TaskSpec("demo.noop", {"i": i}) for i in range(600)])
    workers = [
        spawn(settings, "worker", "--direct", "--app", "ledgerq.demo.app", "--direct-batch", "20")
        for _ in range(3)
    ]
    try:
        _until(lambda: _direct_claimers(settings) >= len(workers), "the direct workers started")
        late: list[int] = []
        for chunk in range(4):  # enqueued while they run: woken by NOTIFY
            late += enqueue_committed(
                settings, [TaskSpec("demo.noop", {"late": chunk, "i": i}) for i in range(50)]
            )
            time.sleep(0.2)
        wanted = set(backlog) | set(late)
        deadline = time.monotonic() + 60
        while len(_history(settings)) < len(wanted) and time.monotonic() < deadline:
            assert all(w.poll() is None for w in workers), "a direct worker exited"
            time.sleep(0.2)
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        outputs = []
        for w in workers:
            try:
                outputs.append(w.communicate(timeout=30)[0])
            except subprocess.TimeoutExpired:
                w.kill()
                outputs.append(w.communicate()[0])
    history = _history(settings)
    assert sorted(i for i, _, _ in history) == sorted(wanted), outputs
    assert {(s, a) for _, s, a in history} == {("succeeded", 1)}
    assert all(w.returncode == 0 for w in workers), outputs
    assert not any("AMQP" in o or "Traceback" in o for o in outputs), outputs


@pytest.mark.parametrize(
    ("value", "says"),
    [("0", "direct batch must be 1..10000, got 0"), ("x", "'x' is not a valid integer")],
)
def test_a_bad_direct_batch_is_one_line(settings: Settings, value: str, says: str) -> None:
    result = ledgerq(
        settings, "worker", "--direct", "--app", "ledgerq.demo.app", "--direct-batch", value
    )
    assert result.returncode != 0
    assert says in result.stderr and "Traceback" not in result.stderr
