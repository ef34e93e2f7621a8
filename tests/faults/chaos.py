"""The combined run's moving parts: its fault schedule, its producer, and the tick
that fires the faults as the drain progresses (tests/faults/test_combined.py).

Faults fire at fractions of the planned tasks finished, not at times, so a seed
replays the same schedule on a slow or a fast machine. The kinds: ``worker_kill``
and ``relay_kill`` (SIGKILL, the cluster restarts the process), ``db_kill``
(``pg_terminate_backend`` on the services' connections), ``broker_restart`` (the
suite's own RabbitMQ node), ``pg_restart`` (``pg_ctl restart -m fast`` of the
suite's own PostgreSQL, tests/postgres.py: never the shared server) and, on a
clock rather than a fraction, the xmin hold (tests/faults/xmin.py): with it, the
tasks are produced at a steady rate, the other faults fire at fractions of the
tasks produced in its chaos phase, and the hold comes after them, alone.

The producer commits in chunks of at most 500 tasks, one transaction each, on
the next ledger shard, each followed by ten enqueues in rolled-back transactions
(their tasks must never run). Every ``KEY_EVERY``-th of the first
``keyed * KEY_EVERY`` tasks carries one of ``KEYS`` ordering keys, so the history
checker's per-key order has lines to check. A commit that fails (the database is
restarting) is retried at the next tick.
"""

from __future__ import annotations

import asyncio
import random
import signal
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue
from ledgerq.core.config import Settings
from ledgerq.core.errors import TransientStorageError
from ledgerq.ledger.pg.engines import sync_engine
from tests.faults.cluster import Cluster, terminal_count
from tests.faults.outages import kill_backends, restart_broker
from tests.faults.xmin import Hold, HoldPhases
from tests.harness import enqueue_committed
from tests.postgres import PgServer
from tests.rabbit import RabbitNode

KEYS, KEY_EVERY, CHUNK = 5, 20, 500
#: Faults that take seconds (tens on a loaded machine): they run beside the
#: ticks, so the drain is watched, and later faults fire, while a server restarts.
SLOW = ("broker_restart", "pg_restart")


@dataclass
class Fault:
    at: float  # fraction of tasks finished when it fires
    kind: str  # worker_kill | broker_restart | db_kill | relay_kill | pg_restart
    target: str = ""


def schedule(
    rng: random.Random,
    workers: int,
    worker_kills: int,
    db_kills: int,
    pg_restarts: int = 0,
    restart_window: tuple[float, float] = (0.15, 0.85),
) -> list[Fault]:
    """The faults, drawn from ``rng`` (the new kinds after the old, so a seed
    replays the same kills as before they were added)."""
    faults = [
        Fault(rng.uniform(0.05, 0.9), "worker_kill", f"worker-{rng.randrange(workers)}")
        for _ in range(worker_kills)
    ]
    faults += [Fault(rng.uniform(0.1, 0.85), "db_kill") for _ in range(db_kills)]
    faults.append(Fault(rng.uniform(0.2, 0.6), "broker_restart"))
    faults.append(Fault(rng.uniform(0.1, 0.8), "relay_kill", "relay"))
    faults += [Fault(rng.uniform(*restart_window), "pg_restart") for _ in range(pg_restarts)]
    return sorted(faults, key=lambda f: f.at)


def rolled_back(settings: Settings, n: int) -> None:
    """Producers whose business transactions fail: their tasks must never run."""
    engine = sync_engine(settings, "ledgerq-test-rollback", pool_size=1)
    with Session(engine) as session:
        for i in range(n):
            session.begin()
            enqueue(session, "fault.write", {"marker": "rolled-back", "n": i})
            session.rollback()
    engine.dispose()


def spec(i: int, keyed: int = 50) -> TaskSpec:
    """The ``i``-th task of a run."""
    key = None
    if i % KEY_EVERY == 0 and i < keyed * KEY_EVERY:
        key = f"key-{(i // KEY_EVERY) % KEYS}"
    return TaskSpec(
        "fault.write", {"n": i, "sleep": 0.002}, retry=[0.2], max_attempts=10, ordering_key=key
    )


class Producer:
    def __init__(self, settings: Settings) -> None:
        self.shards = settings.ledger_shards()
        self.ids: list[int] = []

    def upto(self, count: int) -> None:
        """Commit tasks until ``count`` are; stop at the first failed commit."""
        while len(self.ids) < count:
            first = len(self.ids)
            shard = self.shards[(first // CHUNK) % len(self.shards)]
            end = min((first // CHUNK + 1) * CHUNK, count)
            try:
                self.ids += enqueue_committed(shard, [spec(i) for i in range(first, end)])
                if first % CHUNK == 0:
                    rolled_back(shard, 10)
            except (DBAPIError, TransientStorageError) as exc:  # restarting: next tick
                print(f"producer: {exc.__class__.__name__} at {len(self.ids)}")
                return


async def fire(
    fault: Fault, cluster: Cluster, broker_node: RabbitNode, server: PgServer | None
) -> None:
    if fault.kind in ("worker_kill", "relay_kill"):
        # Restart what died first, so every kill lands on a live process
        # (when faults bunch up, on one still starting: a crash at start-up).
        cluster.supervise()
        landed = cluster.kill(fault.target, signal.SIGKILL)
        assert landed, f"{fault.target} was not running when its kill came"
    elif fault.kind == "db_kill":
        kill_backends(cluster.settings)
    elif fault.kind == "pg_restart":
        assert server is not None, "a restart needs the suite's own server"
        await asyncio.to_thread(server.restart)
    else:
        await asyncio.to_thread(restart_broker, broker_node)


class Chaos:
    """The settle loop's tick: produce (with a hold: at its rate), step the hold's
    phases, fire the faults whose fraction has come (a server restart in the
    background); ``busy`` while any is left or still running."""

    def __init__(
        self,
        cluster: Cluster,
        producer: Producer,
        faults: list[Fault],
        total: int,
        hold: Hold | None,
        broker_node: RabbitNode,
        server: PgServer | None,
    ) -> None:
        self.cluster, self.producer, self.total, self.hold = cluster, producer, total, hold
        self.pending = list(faults)
        self.fired: list[str] = []
        self.slow: list[asyncio.Future[None]] = []
        # One restart of a server at a time: a second ``pg_ctl restart`` of the
        # same data directory while the first is still starting it fails with
        # "could not start server" (a fault of the harness, not of the system
        # under test), so a restart that comes early waits for the one under way.
        self.serial = {kind: asyncio.Lock() for kind in SLOW}
        self.broker_node, self.server = broker_node, server
        self.phases = HoldPhases(cluster.settings, hold) if hold else None

    async def tick(self, elapsed: float) -> None:
        if self.hold is not None and self.phases is not None and self.phases.producing():
            self.producer.upto(int(self.hold.rate * elapsed))
        try:
            finished = await terminal_count(self.cluster.ledger, self.producer.ids)
        except TransientStorageError as exc:  # the test's own connections meet a restart
            print(f"progress check failed during a fault: {exc.__class__.__name__}")
            return
        done = finished / self.total
        if self.phases is not None:
            calm = not (self.pending or self.slow)
            began = await self.phases.step(elapsed, len(self.producer.ids), finished, calm)
            if began:
                self.fired.append(f"{began} at {done:.1%} ({elapsed:.1f}s)")
            done = finished / self.hold.chaos_tasks if self.hold else done
        while self.pending and done >= self.pending[0].at:
            fault = self.pending.pop(0)
            firing = fire(fault, self.cluster, self.broker_node, self.server)
            if fault.kind in SLOW:
                self.slow.append(asyncio.ensure_future(self._one_at_a_time(fault.kind, firing)))
            else:
                await firing
            self.fired.append(f"{fault.kind} {fault.target} at {done:.1%} ({elapsed:.1f}s)")
        for task in [t for t in self.slow if t.done()]:
            self.slow.remove(task)
            task.result()  # a restart that failed fails the run

    async def _one_at_a_time(self, kind: str, firing: Coroutine[Any, Any, None]) -> None:
        async with self.serial[kind]:
            await firing

    def busy(self) -> bool:
        if self.pending or self.slow:
            return True
        return self.phases is not None and self.phases.producing()
