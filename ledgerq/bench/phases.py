"""The benchmark's phases, each measured against the real services.

Times come from the database where they can (``published_at``, ``started_at``,
``finished_at``), so process start-up is not counted and one clock is used.
Producers enqueue through a synchronous Session, as most applications do; the
ledger's own questions go through the storage seam, on one event loop
(``run``) that lives as long as the benchmark.
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypeVar

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ledgerq import TaskSpec, enqueue, enqueue_many
from ledgerq.core.config import Settings
from ledgerq.ledger.protocol import HarnessLedger, InspectionLedger, SchedulingLedger
from ledgerq.processes import Services

T = TypeVar("T")

#: The relay's closing line (relay/service.py): its totals.
_RELAY_TOTALS = re.compile(
    r"relay stopped: .*published=(?P<published>\d+).*messages=(?P<messages>\d+)"
)


class RunCoroutine(Protocol):
    """Run a coroutine to completion on the benchmark's event loop."""

    def __call__(self, coro: Coroutine[Any, Any, T], /) -> T: ...


Progress = Callable[[int, int], None]


class BenchLedger(HarnessLedger, InspectionLedger, SchedulingLedger, Protocol):
    """What the benchmark asks of its ledger: the testing protocol (empty it, measure
    a drain), the broker windows it samples while a drain runs, and an enqueue of
    its own (``--results``). PostgreSQL's, MySQL / MariaDB's and the sharded one."""

    async def dispose(self) -> None: ...


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"p50": 0.0, "p95": 0.0, "p99": 0.0}
    if len(values) == 1:
        return {"p50": values[0], "p95": values[0], "p99": values[0]}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": round(cuts[49], 2), "p95": round(cuts[94], 2), "p99": round(cuts[98], 2)}


@dataclass
class LatencySample:
    commit_at: float  # seconds since the phase began
    to_start_ms: float
    to_finish_ms: float


@dataclass
class Bench:
    settings: Settings
    engine: Engine
    #: With ledger shards (``--ledger-shards``), every shard's: only the drains run.
    ledger: BenchLedger
    run: RunCoroutine
    log_dir: Path
    workers: int
    concurrency: int
    #: 0: no metrics; else the relay serves them on this port, worker i on port + 1 + i.
    metrics_port: int = 0
    #: Extra ``ledgerq worker`` options (e.g. ``--no-batch-commit`` to compare).
    worker_args: tuple[str, ...] = ()
    #: Relay processes the drains run (they share the due rows: SKIP LOCKED).
    relays: int = 1
    #: With ledger shards: each shard's engine; enqueued chunks take them in turn.
    shard_engines: Sequence[Engine] = ()
    #: ``bench --direct``: the workers claim from the ledger (``worker --direct``), no relay.
    direct: bool = False
    services: Services = field(init=False)

    def __post_init__(self) -> None:
        self.services = Services(self.settings, self.log_dir)
        self._worker_pids: list[int] = []
        #: Worker CPU (ms) per task in the last drain: steadier than a rate on a busy machine.
        self.last_cpu_ms_per_task = 0.0
        self._relays: list[subprocess.Popen[bytes]] = []
        #: Direct workers' peak RSS, taken before each drain stops them.
        self.direct_rss_mb = 0.0
        #: The last drain's broker windows, sampled while it ran: published over
        #: capacity, summed over the live routes (each sample one number).
        self.last_occupancy: list[float] = []
        #: The last drain's tasks per message, from its relays' closing counts.
        self.last_envelope = 0.0

    def reset(self) -> None:
        self.run(self.ledger.truncate(keep_subscriptions=True))  # its workers run on

    def history_count(self) -> int:
        return self.run(self.ledger.count_finished())

    # -- enqueue ---------------------------------------------------------------
    def enqueue_single(self, n: int, progress: Progress) -> float:
        started = time.perf_counter()
        for i in range(n):
            with Session(self.engine) as session, session.begin():
                enqueue(session, "demo.noop", {"i": i})
            if i % 100 == 0:
                progress(i, n)
        return n / (time.perf_counter() - started)

    def enqueue_batch(
        self, n: int, kind: str, progress: Progress, chunk: int = 1000, keys: int = 0
    ) -> float:
        """``keys``: give task i the ordering key ``k<i mod keys>`` (0: unordered). With
        ledger shards, the chunks take the shards in turn (a backlog smaller than a
        chunk per shard is cut into one chunk per shard)."""
        if self.shard_engines:
            chunk = min(chunk, -(-n // len(self.shard_engines)))
        started = time.perf_counter()
        for first in range(0, n, chunk):
            specs = [
                TaskSpec(kind, {"order": i}, ordering_key=f"k{i % keys}" if keys else None)
                for i in range(first, min(first + chunk, n))
            ]
            engine = self.engine
            if self.shard_engines:
                engine = self.shard_engines[(first // chunk) % len(self.shard_engines)]
            with Session(engine) as session, session.begin():
                enqueue_many(session, specs)
            progress(min(first + chunk, n), n)
        return n / (time.perf_counter() - started)

    # -- services --------------------------------------------------------------
    def start_workers(self) -> None:
        if self.direct:
            return  # started by start_relay: each drain's backlog is committed first
        self._start_workers()

    def _start_workers(self) -> list[subprocess.Popen[bytes]]:
        started = []
        for i in range(self.workers):
            proc = self.services.start(
                f"worker-{i}",
                [
                    *("worker", "--app", "ledgerq.demo.app"),
                    *("--concurrency", str(self.concurrency), *self._metrics(1 + i)),
                    *self.worker_args,
                    *(["--direct"] if self.direct else []),
                ],
            )
            self._worker_pids.append(proc.pid)
            started.append(proc)
        return started

    def start_relay(self) -> None:
        """The relays (only the first serves metrics: the workers' ports follow it);
        for direct workers, the workers themselves (they claim what is due at once)."""
        if self.direct:
            self._worker_pids = []
            self._relays = self._start_workers()
            return
        for i in range(self.relays):
            metrics = self._metrics(0) if i == 0 else []
            self._relays.append(self.services.start(f"relay-{i}", ["relay", *metrics]))

    def _metrics(self, offset: int) -> list[str]:
        return ["--metrics-port", str(self.metrics_port + offset)] if self.metrics_port else []

    def stop_relay(self) -> None:
        if self.direct:
            self.direct_rss_mb = max(self.direct_rss_mb, self.worker_peak_rss_mb())
        for relay in self._relays:
            self.services.procs.remove(relay)
            relay.terminate()
        for relay in self._relays:
            relay.wait(30)
        self._relays = []

    def _worker_tree(self) -> list[int]:
        """The worker processes and their children (``worker --processes N``)."""
        pids = list(self._worker_pids)
        for pid in self._worker_pids:
            try:
                pids += map(int, Path(f"/proc/{pid}/task/{pid}/children").read_text().split())
            except OSError:
                continue
        return pids

    def worker_cpu_s(self) -> float:
        """CPU seconds (user + system) the worker processes (and their children, with
        ``--processes``: the live ones) have used so far."""
        ticks = 0
        for pid in self._worker_tree():
            try:
                fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
        return ticks / os.sysconf("SC_CLK_TCK")

    def worker_peak_rss_mb(self) -> float:
        peaks = []
        for pid in self._worker_tree():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmHWM:"):
                    peaks.append(int(line.split()[1]) / 1024)
        return round(max(peaks), 1) if peaks else 0.0

    def wait_finished(self, n: int, progress: Progress, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        self.last_occupancy = []
        while (done := self.history_count()) < n:
            progress(done, n)
            if not self.direct:
                self.last_occupancy.append(self._occupancy())
            if self.services.dead():
                raise RuntimeError(f"a service exited early; see {self.log_dir}/")
            if time.monotonic() > deadline:
                raise RuntimeError(f"only {done}/{n} tasks finished in {timeout:.0f}s")
            time.sleep(0.25)  # polling is cheap, but it is load on the machine measured
        progress(n, n)

    def _occupancy(self) -> float:
        windows = self.run(self.ledger.windows())
        capacity = sum(int(w["capacity"]) for w in windows)
        return sum(int(w["published"]) for w in windows) / capacity if capacity else 0.0

    def _envelope(self) -> float:
        """Tasks per message over the relays' last run (their closing log line)."""
        published = messages = 0
        for i in range(self.relays):
            log = (self.log_dir / f"relay-{i}.log").read_text(errors="replace")
            for line in log.splitlines():
                if found := _RELAY_TOTALS.search(line):
                    published += int(found["published"])
                    messages += int(found["messages"])
        return published / messages if messages else 0.0

    # -- drain -----------------------------------------------------------------
    def drain(
        self, n: int, kind: str, progress: Progress, *, keep_filler: bool = False, keys: int = 0
    ) -> float:
        """From a backlog of ``n`` committed tasks to ``n`` terminal statuses.

        ``keep_filler``: keep the history rows :meth:`fill_history` made (ids <= 0);
        ``keys``: spread the tasks over that many ordering keys."""
        if keep_filler:
            self.run(self.ledger.clear_finished())
        else:
            self.reset()
        self.enqueue_batch(n, kind, lambda d, t: None, keys=keys)
        cpu = self.worker_cpu_s()
        self.start_relay()
        self.wait_finished(n, progress, timeout=max(120.0, n / 50))
        self.last_cpu_ms_per_task = (self.worker_cpu_s() - cpu) * 1000 / n
        self.stop_relay()
        if not self.direct:
            self.last_envelope = self._envelope()
        count, span = self.run(self.ledger.drain_span())
        return float(count) / span if span else 0.0

    def fill_history(self, rows: int) -> None:
        self.run(self.ledger.seed_history(rows))

    # -- latency ---------------------------------------------------------------
    def _warm_up(self) -> None:
        """One task through the path before the clock starts: the relay (or the direct
        workers) just started, and a process start takes seconds on a loaded
        machine (more on MySQL, whose start check is slower), so probes committed
        before it would measure the start-up, not the path."""
        with Session(self.engine) as session, session.begin():
            enqueue(session, "demo.noop", {"warm_up": True})
        self.wait_finished(1, lambda d, t: None, timeout=120)

    def latency(
        self, rate: float, seconds: float, batch: int, progress: Progress
    ) -> list[LatencySample]:
        """Commit ``batch`` tasks per transaction, ``rate`` tasks/s, for ``seconds``."""
        self.reset()
        self.start_relay()
        self._warm_up()
        commits: dict[int, float] = {}
        origin = time.time()
        interval = batch / rate
        total = int(rate * seconds)
        sent = 0
        next_at = time.perf_counter()
        while sent < total:
            with Session(self.engine) as session, session.begin():
                ids = [enqueue(session, "demo.noop", {"probe": sent + k}) for k in range(batch)]
            committed = time.time()
            commits.update(dict.fromkeys(ids, committed))
            sent += batch
            progress(sent, total)
            next_at += interval
            time.sleep(max(0.0, next_at - time.perf_counter()))
        self.wait_finished(1 + len(commits), lambda d, t: None, timeout=60)
        self.stop_relay()
        samples = []
        for timing in self.run(self.ledger.timings(commits)):
            at = commits[timing.id]
            started, finished = timing.started or at, timing.finished or at
            samples.append(
                LatencySample(at - origin, (started - at) * 1000, (finished - at) * 1000)
            )
        return sorted(samples, key=lambda s: s.commit_at)
