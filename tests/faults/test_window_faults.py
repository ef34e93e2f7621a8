"""The window and envelopes under SIGKILL (issue 24): nothing is lost, nothing runs twice.

Real ``ledgerq worker`` processes (``tests.apps.window_app``), SIGKILLed at a
chosen state that the test reads from the ledger; the relay and the reconciler
run in the test's event loop (:func:`ledgerq.compose.open_relay`,
:func:`ledgerq.compose.open_reconciler`), so every batch and every pass, and
what it did, is the test's to see. The reconciler's stall window is far longer
than a test: a published row reaches a live worker only by the window's own
means (a redelivered envelope, or ``unpublish_unserved`` and the relay), never
by a stall re-publish.

- A ``--shards 2-3`` worker killed holding published tasks: its subscription
  lapses within one lease, the next reconciler pass takes its published rows
  back (``unpublish_unserved``), and a worker with a different, covering shard
  set runs every task once.
- A worker killed halfway through an envelope: the broker redelivers the
  envelope, and the next worker runs only its unfinished tasks.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pytest

from ledgerq import TaskSpec
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_reconciler, open_relay
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.routing import routing_key
from ledgerq.ledger.states import TERMINAL
from ledgerq.relay.reconciler import ReconcileCounts, Reconciler, ReconcilerConfig
from ledgerq.relay.service import Relay, RelayConfig
from tests.harness import db, enqueue_committed
from tests.support import ledgerq_env

APP = "tests.apps.window_app"
#: The workers' lease (their heartbeat is a quarter of it, their subscription lives one).
LEASE_S = 4.0
#: Seconds between the test's reconciler passes.
RECONCILE_EVERY_S = 0.5
#: Longer than any test here: no published row is re-published as stalled.
STALL_S = 120.0

EFFECTS_DDL = """CREATE TABLE window_effects (
    id bigserial PRIMARY KEY, task_id bigint NOT NULL, attempt int NOT NULL, pid int NOT NULL)"""

#: Log lines that mean a bug of ours rather than the injected SIGKILL (as tests/faults/cluster.py).
INTERNAL_ERRORS = (
    "handler task ended with",
    "Task exception was never retrieved",
    "PRECONDITION_FAILED",
    "unknown delivery tag",
    "Traceback",
)


@dataclass
class Workers:
    """The test's ``ledgerq worker`` processes, each logging to its own file."""

    settings: Settings
    log_dir: Path
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, *args: str) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        with (self.log_dir / f"{name}.log").open("ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ledgerq", "-v", "worker", "--app", APP, *args],
                env=ledgerq_env(self.settings),
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self.log_dir / f"{name}.log").read_text(errors="replace")

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        assert proc.poll() is None, f"{name} exited early ({proc.returncode}): {self.log(name)}"
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(30) == -signal.SIGKILL

    def stop(self) -> None:
        """SIGTERM every live one, then SIGKILL what has not exited within 30 s."""
        live = [p for p in self.procs.values() if p.poll() is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        for proc in live:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop_one(self, name: str) -> dict[str, int]:
        """SIGTERM one worker, wait for it, and return the counts it logged on exit."""
        proc = self.procs[name]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, self.log(name)
        found = re.search(r"worker stopped: WorkerCounts\((.*?)\)", self.log(name))
        assert found, self.log(name)
        return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", found.group(1))}

    def internal_errors(self) -> list[str]:
        return [
            f"{name}: {line.strip()[:300]}"
            for name in self.procs
            for line in self.log(name).splitlines()
            if any(marker in line for marker in INTERNAL_ERRORS)
        ]


@pytest.fixture
async def workers(settings: Settings, ledger: PgLedger, tmp_path: Path) -> AsyncIterator[Workers]:
    """The test's worker processes, stopped whatever happens; then the routed broker
    queues they subscribed to are deleted (tests/conftest.py deletes the plain ones)."""
    with db(settings) as conn:
        conn.execute("DROP TABLE IF EXISTS window_effects")
        conn.execute(EFFECTS_DDL)
    started = Workers(settings, tmp_path)
    try:
        yield started
    finally:
        await asyncio.to_thread(started.stop)
        routes = {(s["queue"], s["route"]) for s in await ledger.subscriptions()}
        topology = Topology(settings.amqp_prefix)
        connection = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
        try:
            channel = connection.channel()
            for queue, route in routes:
                channel.queue_delete(topology.task_queue(routing_key(queue, route or None)).name)
        finally:
            connection.close()


@dataclass
class Pass:
    """One reconciler pass: when it started and ended (wall clock) and what it did."""

    started: float
    ended: float
    counts: ReconcileCounts


@dataclass
class Services:
    """The relay and the reconciler, in the test's event loop, and every pass it ran."""

    relay: Relay
    reconciler: Reconciler
    ledger: PgLedger
    workers: Workers
    passes: list[Pass] = field(default_factory=list)

    async def reconcile(self) -> ReconcileCounts:
        started = time.time()
        counts = await self.reconciler.run_once()
        self.passes.append(Pass(started, time.time(), counts))
        return counts

    def total(self, name: str) -> int:
        return sum(int(getattr(p.counts, name)) for p in self.passes)

    async def settle(self, ids: list[int], timeout: float = 40.0) -> None:
        """Relay batches, and a reconciler pass every RECONCILE_EVERY_S, until every id
        is terminal; the workers that were not killed must stay up."""
        deadline = time.monotonic() + timeout
        last = 0.0
        while True:
            await self.relay.run_once()
            if time.monotonic() - last >= RECONCILE_EVERY_S:
                last = time.monotonic()
                await self.reconcile()
            where = await self.ledger.whereabouts(ids)
            if all(where.get(i) in TERMINAL for i in ids):
                return
            for name, proc in self.workers.procs.items():
                if proc.poll() not in (None, -signal.SIGKILL):
                    raise AssertionError(f"{name} exited: {self.workers.log(name)}")
            if time.monotonic() > deadline:
                raise AssertionError(f"not settled in {timeout}s: {Counter(where.values())}")
            await asyncio.sleep(0.1)


@asynccontextmanager
async def services(
    settings: Settings, ledger: PgLedger, workers: Workers
) -> AsyncIterator[Services]:
    config = RelayConfig(batch_size=100, poll_interval=0.2, confirm_timeout=5)
    async with (
        open_relay(settings, config) as relay,
        open_reconciler(settings, ReconcilerConfig(stall_s=STALL_S)) as reconciler,
    ):
        yield Services(relay, reconciler, ledger, workers)


async def live_subscription(
    ledger: PgLedger, workers: Workers, name: str, timeout: float = 30.0
) -> dict[str, Any]:
    """The worker process's live subscription row (its worker id holds its pid)."""
    proc = workers.procs[name]
    deadline = time.monotonic() + timeout
    while True:
        for row in await ledger.subscriptions():
            if row["live"] and str(row["worker"]).split(":")[-2] == str(proc.pid):
                return row
        if proc.poll() is not None:
            raise AssertionError(f"{name} exited ({proc.returncode}): {workers.log(name)}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{name} did not subscribe within {timeout}s")
        await asyncio.sleep(0.05)


async def subscription_of(ledger: PgLedger, worker_id: str) -> dict[str, Any]:
    [row] = [r for r in await ledger.subscriptions() if r["worker"] == worker_id]
    return row


async def rows(ledger: PgLedger, ids: list[int]) -> dict[int, dict[str, Any]]:
    return {i: await ledger.show(i) for i in ids}


def effects(settings: Settings) -> dict[int, list[tuple[int, int]]]:
    """``task_id -> [(attempt, pid), ...]``: every committed run of the handler."""
    runs: dict[int, list[tuple[int, int]]] = {}
    with db(settings) as conn:
        for task_id, attempt, pid in conn.execute(
            "SELECT task_id, attempt, pid FROM window_effects ORDER BY id"
        ):
            runs.setdefault(int(task_id), []).append((int(attempt), int(pid)))
    return runs


def worker_args(concurrency: int, *more: str) -> tuple[str, ...]:
    return (
        "--concurrency",
        str(concurrency),
        "--lease",
        str(LEASE_S),
        "--grace",
        "1",
        "--db-pool",
        "2",
        *more,
    )


async def unpublish_audits(ledger: PgLedger, task_id: int) -> list[dict[str, Any]]:
    """The task's audit records of the reconciler taking it back from an unserved route."""
    found = await ledger.find(task_id)
    return [a for a in found["audit"] if a["action"] == "unpublish_unserved"]


async def test_a_shards_worker_killed_with_published_tasks_hands_them_to_a_covering_worker(
    settings: Settings, ledger: PgLedger, workers: Workers, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEDGERQ_SHARDS", "4")  # the producer's and the workers' shard count
    # long enough that nothing A claimed finishes before the kill, however slowly the
    # loop below sees A's window fill on a loaded machine (1.5 s was close to that)
    work = {"sleep": 3.0}
    ids = enqueue_committed(
        settings,
        [TaskSpec("window.work", work, shard=2 + n % 2, max_attempts=3) for n in range(10)]
        + [TaskSpec("window.work", work, shard=n, max_attempts=3) for n in (0, 1)],
    )
    workers.start("worker-a", *worker_args(2, "--shards", "2-3"))
    async with services(settings, ledger, workers) as svc:
        sub_a = await live_subscription(ledger, workers, "worker-a")
        assert (sub_a["shards"], sub_a["capacity"]) == ([2, 3], 4)  # capacity: its prefetch
        # Relay batches until A runs two tasks and its window is full of published ones.
        deadline = time.monotonic() + 30
        while True:
            await svc.relay.run_once()
            now = await rows(ledger, ids)
            by_status = Counter(r["status"] for r in now.values())
            if by_status["running"] == 2 and by_status["published"] == sub_a["capacity"]:
                break
            assert time.monotonic() < deadline, f"A never filled its window: {by_status}"
            await asyncio.sleep(0.05)
        workers.kill("worker-a")
        killed_at = time.time()
        # A is gone and neither the relay nor the reconciler has run since: this is
        # what it left behind.
        left = await rows(ledger, ids)
        held = sorted(i for i, r in left.items() if r["status"] == "published")
        ran = sorted(i for i, r in left.items() if r["status"] == "running")
        assert len(held) == 4 and len(ran) == 2, Counter(r["status"] for r in left.values())
        assert {left[i]["route"] for i in held} == {sub_a["route"]}
        assert {left[i]["worker"] for i in ran} == {sub_a["worker"]}
        assert {left[i]["shard"] for i in held + ran} <= {2, 3}
        lapses_at = (await subscription_of(ledger, sub_a["worker"]))["expires_at"].timestamp()
        assert lapses_at <= killed_at + LEASE_S + 0.2  # refreshed for one lease at most

        workers.start("worker-b", *worker_args(4, "--shards", "0-3"))
        await svc.settle(ids)
        sub_b = await live_subscription(ledger, workers, "worker-b")

    assert sub_b["route"] != sub_a["route"] and sub_b["shards"] == [0, 1, 2, 3]
    # Taken back exactly once, by a pass after A's subscription lapsed: within one
    # lease plus one reconciler pass of the kill. The passes come as fast as the loaded
    # machine runs them, so the slack is generous (10 s); what it tells apart is the
    # route's lapse from the stall window (STALL_S, 120 s), never reached here.
    taking = [p for p in svc.passes if p.counts.unpublished]
    assert [p.counts.unpublished for p in taking] == [len(held)], svc.passes
    assert taking[0].ended >= lapses_at - 0.1  # never while A's route was still live
    assert taking[0].started - killed_at <= LEASE_S + RECONCILE_EVERY_S + 10.0, (
        taking[0].started - killed_at
    )
    # A's running rows: expired as usual, released uncharged (it had two in flight).
    assert (svc.total("expired"), svc.total("released"), svc.total("dead")) == (2, 2, 0)
    assert svc.total("republished") == 0  # nothing stalled: the window moved them

    final = await rows(ledger, ids)
    assert {r["status"] for r in final.values()} == {"succeeded"}
    for task_id, row in final.items():
        audits = await unpublish_audits(ledger, task_id)
        if task_id in held:
            assert [(a["actor"], a["outcome"]) for a in audits] == [("ledgerq", "changed")]
            assert row["epoch"] > left[task_id]["epoch"]
        else:
            assert audits == [], (task_id, audits)
        assert row["attempts"] == 1, row  # nobody was charged for A's death
    assert {i for i in ids if final[i]["suspect"]} == set(ran)
    # Every handler committed once, all of them on B (A finished nothing).
    b_pid = workers.procs["worker-b"].pid
    assert effects(settings) == {i: [(1, b_pid)] for i in ids}
    assert await ledger.count_expired() == 0
    assert not workers.internal_errors(), workers.internal_errors()


async def test_a_worker_killed_halfway_through_an_envelope_reruns_only_the_unfinished(
    settings: Settings, ledger: PgLedger, workers: Workers
) -> None:
    # Two quick tasks first (the envelope keeps the ledger's order, id here), then
    # four slow ones: with two slots, the quick ones finish, then two slow ones run
    # while the other two wait unclaimed in the worker's inbox.
    ids = enqueue_committed(
        settings,
        [TaskSpec("window.work", {"sleep": 0.1}, max_attempts=3) for _ in range(2)]
        + [TaskSpec("window.work", {"sleep": 2.5}, max_attempts=3) for _ in range(4)],
    )
    args = worker_args(2, "--prefetch", "8")  # a window of 8: room for one envelope of 6
    workers.start("worker-a", *args)
    async with services(settings, ledger, workers) as svc:
        sub_a = await live_subscription(ledger, workers, "worker-a")
        assert sub_a["capacity"] == 8
        counts = await svc.relay.run_once()
        # One AMQP message carried all six tasks.
        assert (counts.published, counts.messages) == (len(ids), 1), counts
        deadline = time.monotonic() + 30
        while True:
            by_status = Counter((await ledger.whereabouts(ids)).values())
            # The quick two committed, two slow ones run, two wait in A's inbox.
            if by_status == {"succeeded": 2, "running": 2, "published": 2}:
                break
            assert time.monotonic() < deadline, f"never half done: {by_status}"
            await asyncio.sleep(0.02)
        workers.kill("worker-a")
        left = await rows(ledger, ids)
        finished = sorted(i for i, r in left.items() if r["status"] == "succeeded")
        running = sorted(i for i, r in left.items() if r["status"] == "running")
        waiting = sorted(i for i, r in left.items() if r["status"] == "published")
        assert (finished, len(running), len(waiting)) == (ids[:2], 2, 2), left
        assert {left[i]["worker"] for i in running} == {sub_a["worker"]}
        assert {left[i]["route"] for i in waiting} == {sub_a["route"]}
        a_pid = workers.procs["worker-a"].pid
        assert effects(settings) == {i: [(1, a_pid)] for i in finished}

        # B serves the same route: the broker redelivers A's unacked envelope to it.
        workers.start("worker-b", *args)
        sub_b = await live_subscription(ledger, workers, "worker-b")
        assert sub_b["route"] == sub_a["route"]
        await svc.settle(ids)
        b = await asyncio.to_thread(workers.stop_one, "worker-b")

    # B got the envelope again and claimed only its two waiting tasks: the two A
    # finished and the two it was running were skipped (their fences had moved on).
    # Then A's running ones, expired and released uncharged, came one per message.
    assert (b["received"], b["skipped"], b["claimed"], b["rejected"]) == (3, 4, 4, 0), b
    # Nothing was taken back from the route or re-published as stalled.
    assert (svc.total("unpublished"), svc.total("republished")) == (0, 0)
    assert (svc.total("expired"), svc.total("released")) == (len(running), len(running))
    final = await rows(ledger, ids)
    assert {r["status"] for r in final.values()} == {"succeeded"}
    assert [i for i in ids if final[i]["attempts"] != 1] == []  # none re-attempted
    assert {i for i in ids if final[i]["suspect"]} == set(running)
    b_pid = workers.procs["worker-b"].pid
    assert effects(settings) == {
        i: [(1, a_pid if i in finished else b_pid)] for i in ids
    }  # each once; the finished ones never ran again
    assert await ledger.count_expired() == 0
    assert not workers.internal_errors(), workers.internal_errors()
