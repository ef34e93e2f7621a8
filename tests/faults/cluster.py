"""Real relay and worker processes, supervised like a ReplicaSet, plus the checker.

``Cluster`` starts ``python -m ledgerq relay`` and N ``worker`` processes and
restarts any that die (the environment that made one crash is dropped on
restart, as a fixed deploy would). The test process runs the reconciler itself
(built by :func:`ledgerq.compose.open_reconciler`, ``await run_once()``), so
every pass is visible to it. On a ledger split across databases (ledger
shards) the relay process serves every shard, the test runs one reconciler per
shard, and the checker reads every shard.

``check`` is the total-queue check, after Jepsen's: every committed task has
exactly one terminal status, none is lost, nothing from a rolled-back
transaction ran, handlers that write through the context's transaction left
exactly one effect, the workers' broker queues are empty and no ``running`` lease
is left. How each task got there (no overlapping attempts, the terminal write's
epoch, one terminal status, per-key order) is checked by tests/faults/history.py.
Task statuses are read through the storage seam; the effects table is the
test's own and read with SQL.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pika
import pika.exceptions

from ledgerq.alerting.alerts import log_alert
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_ledger, open_reconciler
from ledgerq.core.config import Settings
from ledgerq.core.errors import TransientStorageError
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.routing import routing_key
from ledgerq.ledger.split.ledger import ShardedLedger
from ledgerq.ledger.states import LIVE, TERMINAL
from ledgerq.relay.reconciler import ReconcileCounts, Reconciler, ReconcilerConfig
from tests.apps.fault_app import EFFECTS_DDL
from tests.harness import db

WORKER_ARGS = (
    "worker",
    "--app",
    "tests.apps.fault_app",
    "--concurrency",
    "8",
    "--lease",
    "2",
    "--grace",
    "5",
    # The fault suite runs beside two other groups of tests on one PostgreSQL
    # server (scripts/test.sh), and in a combined run over two ledger shards each
    # worker holds handler pools on both: small pools keep the three groups' peak
    # well under the default max_connections of 100.
    "--db-pool",
    "4",
)

#: The summary of every combined run in this session, for the closing totals.
COMBINED_RUNS: list[dict[str, Any]] = []

#: What each role logs once it is serving (see :meth:`Cluster.ready`).
READY = {"relay": b"relay running", "worker": b" consuming "}

#: Called on every pass of :meth:`Cluster.settle` with the seconds since it began.
Tick = Callable[[float], Awaitable[None]]


@dataclass
class Member:
    role: str
    args: Sequence[str]
    env: dict[str, str]
    proc: subprocess.Popen[bytes] | None = None
    exits: list[int] = field(default_factory=list)
    starts: int = 0


class Cluster:
    def __init__(
        self,
        settings: Settings,
        log_dir: Path,
        *,
        workers: int = 2,
        worker_env: dict[str, str] | None = None,
        relay_env: dict[str, str] | None = None,
        worker_args: Sequence[str] = WORKER_ARGS,
    ) -> None:
        self.settings = settings
        self.log_dir = log_dir
        self.members = [Member("relay", ("relay", "--poll-interval", "0.2"), relay_env or {})]
        self.members += [
            Member(f"worker-{i}", worker_args, dict(worker_env or {}) if i == 0 else {})
            for i in range(workers)
        ]
        self.reconciles: list[ReconcileCounts] = []
        self._stack = AsyncExitStack()
        self._stopped = False

    async def open(self) -> Cluster:
        """Open the test's ledger (for lookups) and the reconciler(s) it runs."""
        count = self.settings.ledger_shard_count
        async with AsyncExitStack() as stack:
            self.ledger: ClusterLedger = await stack.enter_async_context(
                open_lookup_ledger(self.settings, "ledgerq-test-cluster")
            )
            self.reconcilers: list[Reconciler] = [
                await stack.enter_async_context(
                    open_reconciler(
                        self.settings,
                        ReconcilerConfig(stall_s=3.0),
                        alert=log_alert,
                        shard=shard if count > 1 else None,
                    )
                )
                for shard in range(count)
            ]
            self._stack = stack.pop_all()
        return self

    def _env(self, member: Member) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            LEDGERQ_DATABASE_URL=self.settings.database_url,
            LEDGERQ_AMQP_URL=self.settings.amqp_url,
            LEDGERQ_AMQP_PREFIX=self.settings.amqp_prefix,
            LEDGERQ_QUEUE_TYPE=self.settings.queue_type,
            PYTHONPATH=os.getcwd(),
        )
        if member.starts == 0:
            env.update(member.env)
        return env

    def _start(self, member: Member) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{member.role}.log").open("ab")
        member.proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerq", "-v", *member.args],
            env=self._env(member),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        member.starts += 1

    def start(self) -> Cluster:
        for shard in self.settings.ledger_shards():
            with db(shard) as conn:
                conn.execute(EFFECTS_DDL)
        for member in self.members:
            self._start(member)
        return self

    async def ready(self, timeout: float = 60.0) -> Cluster:
        """Wait until every member's latest start says it is serving. On a loaded
        machine a process can take seconds to boot, and the test's reconciler
        (stall window 3 s) would otherwise stand in for a relay still starting."""
        deadline = time.monotonic() + timeout
        for member in self.members:
            marker = READY[member.role.split("-")[0]]
            path = self.log_dir / f"{member.role}.log"
            while path.read_bytes().count(marker) < member.starts:
                if time.monotonic() > deadline:
                    raise AssertionError(f"{member.role} not serving after {timeout:.0f}s")
                await asyncio.sleep(0.1)
        return self

    def supervise(self) -> None:
        """Restart members that died (as Kubernetes would)."""
        for member in self.members:
            if member.proc is not None and member.proc.poll() is not None:
                member.exits.append(member.proc.returncode)
                self._start(member)

    def kill(self, role: str, sig: int = signal.SIGKILL) -> bool:
        """Signal the member's live process; False if it was down already."""
        for member in self.members:
            if member.role == role and member.proc is not None and member.proc.poll() is None:
                member.proc.send_signal(sig)
                member.proc.wait(30)
                return True
        return False

    def internal_errors(self) -> list[str]:
        """Log lines that mean a bug of ours, not an injected fault: an exception that
        escaped a worker's task, or a broker complaint about our acks."""
        markers = (
            "handler task ended with",
            "Task exception was never retrieved",
            "PRECONDITION_FAILED",
            "unknown delivery tag",
        )
        found = []
        for log in sorted(self.log_dir.glob("*.log")):
            found += [
                f"{log.name}: {line.strip()[:300]}"
                for line in log.read_text().splitlines()
                if any(m in line for m in markers)
            ]
        return found

    async def verify(self, ids: Sequence[int], effects_expected: Sequence[int]) -> Verdict:
        """The total-queue check, and no internal error in any service's log."""
        verdict = await check(self.settings, self.ledger, ids, effects_expected=effects_expected)
        assert verdict.ok, verdict.as_dict()
        assert not self.internal_errors(), self.internal_errors()
        return verdict

    def workers(self) -> list[str]:
        return [m.role for m in self.members if m.role.startswith("worker")]

    async def reconcile(self) -> ReconcileCounts:
        """One pass of every shard's reconciler; the last one's counts."""
        for reconciler in self.reconcilers:
            counts = await reconciler.run_once()
            self.reconciles.append(counts)
        return counts

    async def settle(
        self,
        ids: Sequence[int],
        timeout: float = 90.0,
        tick: Tick | None = None,
        hold: Callable[[], bool] | None = None,
    ) -> None:
        """Supervise and reconcile until every id is terminal (and ``hold()``, if
        given, is false: the tick still has faults to fire)."""
        started = time.monotonic()
        last_reconcile = 0.0
        while True:
            elapsed = time.monotonic() - started
            if tick is not None:
                await tick(elapsed)
            self.supervise()
            if time.monotonic() - last_reconcile > 0.5:
                try:
                    await self.reconcile()
                except Exception as exc:  # the broker or the DB is down right now
                    print(f"reconcile failed during a fault: {exc!r}")
                last_reconcile = time.monotonic()
            try:
                finished = await terminal_count(self.ledger, ids)
            except TransientStorageError as exc:  # the database is restarting
                print(f"progress check failed during a fault: {exc!r}")
                finished = -1
            if finished == len(ids) and not (hold and hold()):
                return
            if elapsed > timeout:
                raise AssertionError(
                    f"not settled in {timeout}s: {await live_summary(self.ledger)}"
                )
            await asyncio.sleep(0.2)

    def _stop_members(self) -> None:
        for member in self.members:
            if member.proc is not None and member.proc.poll() is None:
                member.proc.send_signal(signal.SIGTERM)
        for member in self.members:
            if member.proc is not None:
                try:
                    member.exits.append(member.proc.wait(60))
                except subprocess.TimeoutExpired:
                    member.proc.kill()
                    member.exits.append(member.proc.wait())

    async def stop(self) -> dict[str, list[int]]:
        """SIGTERM everything and wait, then close the reconciler and the ledger
        (idempotent); return each member's exit codes."""
        if not self._stopped:
            self._stopped = True
            try:
                await asyncio.to_thread(self._stop_members)
            finally:
                await self._stack.aclose()
        return {m.role: m.exits for m in self.members}


#: The test's lookups: one database's ledger, or every shard's.
ClusterLedger = PgLedger | ShardedLedger


@asynccontextmanager
async def open_lookup_ledger(settings: Settings, name: str) -> AsyncIterator[ClusterLedger]:
    """The ledger the checks read: the database, or every ledger shard of it."""
    if settings.ledger_shard_count == 1:
        async with open_ledger(settings, name, pool_size=2) as ledger:
            yield ledger
        return
    async with AsyncExitStack() as stack:
        shards = [
            await stack.enter_async_context(open_ledger(settings, name, pool_size=2, shard=k))
            for k in range(settings.ledger_shard_count)
        ]
        yield ShardedLedger(shards)


async def terminal_count(ledger: ClusterLedger, ids: Sequence[int]) -> int:
    """How many of ``ids`` have a terminal status (are in history)."""
    return sum(1 for status in (await ledger.whereabouts(ids)).values() if status in TERMINAL)


async def live_summary(ledger: ClusterLedger) -> dict[str, int]:
    """Live (unfinished) tasks by status."""
    by_status: dict[str, int] = (await ledger.stats())["by_status"]
    return {s: n for s, n in by_status.items() if s in LIVE}


async def broker_queues(ledger: ClusterLedger) -> list[str]:
    """The broker queues (``queue`` or ``queue@route``) the test's workers consumed: each
    subscription's route, live or lapsed (a worker serves ``<prefix>.q.<queue>@<route>``
    for the kinds it registers), and each such ledger queue's own broker queue."""
    rows = await ledger.subscriptions()
    own = {str(r["queue"]) for r in rows}
    routed = {routing_key(str(r["queue"]), r["route"] or None) for r in rows}
    return sorted(own | routed)


def queue_depth(settings: Settings, queues: Sequence[str] = ("default",)) -> int:
    """Messages waiting in these broker queues, together; one that does not exist
    (nobody ever declared it) holds none."""
    conn = pika.BlockingConnection([pika.URLParameters(url) for url in settings.amqp_urls])
    topology = Topology(settings.amqp_prefix)
    total = 0
    try:
        for queue in queues:
            channel = conn.channel()  # a passive declare of a missing queue closes it
            try:
                ok = channel.queue_declare(topology.task_queue(queue).name, passive=True)
            except pika.exceptions.ChannelClosedByBroker as exc:
                if exc.reply_code != 404:
                    raise
                continue
            total += int(ok.method.message_count or 0)
            channel.close()
        return total
    finally:
        conn.close()


@dataclass
class Verdict:
    committed: int
    terminal: dict[str, int]
    lost: list[int]
    live_left: int
    rolled_back_ran: int
    effect_duplicates: int
    missing_effects: int
    queue_depth: int
    expired_running: int

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.live_left
            or self.rolled_back_ran
            or self.effect_duplicates
            or self.missing_effects
            or self.queue_depth
            or self.expired_running
        )

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "lost": len(self.lost), "ok": self.ok}


async def check(
    settings: Settings,
    ledger: ClusterLedger,
    committed: Sequence[int],
    *,
    effects_expected: Sequence[int] = (),
    rolled_back_marker: str = "rolled-back",
) -> Verdict:
    """The total-queue check. ``effects_expected``: ids whose handler writes one effect."""
    # Stale duplicate deliveries may still be on their way to being acked-and-skipped.
    queues = await broker_queues(ledger)
    depth = queue_depth(settings, queues)
    deadline = time.monotonic() + 15
    while depth and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
        depth = queue_depth(settings, queues)
    ids = list(committed)
    finished = {
        i: status for i, status in (await ledger.whereabouts(ids)).items() if status in TERMINAL
    }
    live_left = sum((await live_summary(ledger)).values())
    expired_running = await ledger.count_expired()
    # The effects table is the test's own (one per ledger shard: a handler's
    # effects commit on its task's shard).
    ran = 0
    per_task: dict[int, int] = {}
    for shard in settings.ledger_shards():
        with db(shard) as conn:
            ran_row = conn.execute(
                "SELECT count(*) FROM fault_effects WHERE marker = %s", (rolled_back_marker,)
            ).fetchone()
            ran += int(ran_row[0]) if ran_row else 0
            for t, n in conn.execute(
                "SELECT task_id, count(*) FROM fault_effects WHERE task_id = ANY(%s) "
                "GROUP BY task_id",
                (list(effects_expected),),
            ):
                per_task[int(t)] = per_task.get(int(t), 0) + int(n)
    return Verdict(
        committed=len(ids),
        terminal=dict(Counter(finished.values())),
        lost=sorted(set(ids) - set(finished)),
        live_left=live_left,
        rolled_back_ran=ran,
        effect_duplicates=sum(n - 1 for n in per_task.values() if n > 1),
        missing_effects=sum(1 for i in effects_expected if i not in per_task),
        queue_depth=depth,
        expired_running=expired_running,
    )


#: The ``make_cluster`` fixture (tests/faults/conftest.py): builds, opens and by
#: default starts a :class:`Cluster`; ``start=False`` leaves the processes to the test.
MakeCluster = Callable[..., Awaitable[Cluster]]
