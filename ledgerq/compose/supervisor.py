"""``ledgerq worker --processes N``: N worker processes under one supervisor.

Each child is an ordinary ``ledgerq worker`` (the supervisor's own command line
minus ``--processes`` and ``--metrics-port``: :func:`ledgerq.processes.child_argv`),
with its ``--concurrency`` slots, its own connections and its own worker id
(``host:pid:token``). The supervisor holds no task and no broker connection; it

- **restarts a child that dies**, with back-off: a child that dies within
  ``stable_s`` of its start waits ``backoff_s``, doubled per such death up to
  ``backoff_max_s``, before it is started again (a crash loop does not spin); a
  child that lived ``stable_s`` starts again at once. A child that exits 64 or
  78 (a usage or configuration error) would fail the same way again: the
  supervisor stops the others and exits with that code. The tasks of a child
  that died otherwise (SIGKILL, the OOM killer) are the reconciler's, exactly as
  for a dead single-process worker: its liveness beats stop, and crash
  attribution judges its running rows (relay/maintenance/rescue.py).
- **stops a sync handler past its timeout for real**: a child runs with a hang
  limit of :data:`~ledgerq.processes.HARD_STOP_S`, so at a sync handler's
  timeout its watchdog ends the child (exit 70, consumers/hung.py) within
  milliseconds, and no line of the handler runs after that. The child's last
  line names the task (:func:`~ledgerq.processes.report_hung`); the supervisor
  then finishes the dead child's running rows itself, fenced on their epochs:
  that task is charged the attempt (its retry after its back-off, or dead once
  its attempts are spent), and every other task the child had in flight is
  released uncharged (``release``: back to pending at once, flagged suspect so
  that it next runs alone). Crash attribution could not do this: it cannot
  tell the culprit among several, and would charge a lone sibling. Then the
  child is replaced at once.
- **drains on SIGTERM** (or SIGINT): the signal is forwarded to every child,
  each drains within its ``--grace`` as a single worker does, and the
  supervisor exits 0 when all exited 0 (a child still starting, killed by the
  signal before it installed its handler, had nothing to drain: 0 too; so does a
  child a sync timeout ended during the drain, once its tasks are settled as
  above); else the first problem's code (69: outcomes not written). A child
  still running ``grace + DRAIN_SLACK_S`` after the signal is killed.
- **serves one metrics endpoint** for all of them: the children record their
  metrics to files in a directory of the supervisor's (prometheus-client's
  multiprocess mode, ``PROMETHEUS_MULTIPROC_DIR``); ``/metrics`` sums them,
  ``/readyz`` is ready while every child runs.

Races: a child that dies at its timeout may have left outcomes of other tasks
unwritten in its finisher: those rows are still running and are released (they
run again: at least once). The reconciler may judge the same rows (the child's
beats stopped): both writes are fenced on (id, epoch, status), one wins. A
restarted child is a new process with a new worker id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import TextClause

from ledgerq.compose.monitoring import stop_event
from ledgerq.consumers.hung import EXIT_HUNG
from ledgerq.core.config import Settings
from ledgerq.health import Health
from ledgerq.ledger.model import Outcome
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import async_engine
from ledgerq.ledger.retry import RetryPolicy
from ledgerq.ledger.sql import load
from ledgerq.processes import SUPERVISED_ENV, service_env

log = logging.getLogger("ledgerq.supervisor")

#: Exit codes of a child that would only fail the same way again (EX_USAGE, EX_CONFIG).
FATAL_CODES = frozenset({64, 78})
#: Seconds past the children's grace before the supervisor kills one still running.
DRAIN_SLACK_S = 30.0
#: The most children one supervisor runs.
MAX_PROCESSES = 1000
#: How often the supervisor looks at its children.
POLL_S = 0.05
_CULPRIT = re.compile(r"^task (\d+) \(")


@dataclass(frozen=True)
class Queries:
    running_of_process: TextClause


Q: Queries = load(Queries, "ledgerq.compose", "supervisor.sql")


@dataclass(frozen=True)
class SupervisorConfig:
    processes: int
    #: The children's --grace (the supervisor waits that long plus DRAIN_SLACK_S).
    grace_s: float = 30.0
    backoff_s: float = 0.5
    backoff_max_s: float = 30.0
    stable_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.processes <= MAX_PROCESSES:
            raise ValueError(f"processes must be 1..{MAX_PROCESSES}, got {self.processes}")
        if not 0 < self.backoff_s <= self.backoff_max_s or self.stable_s <= 0:
            raise ValueError("backoff_s must be positive, at most backoff_max_s; stable_s too")

    def restart_delay(self, quick_deaths: int) -> float:
        """Seconds before a dead child starts again, after ``quick_deaths`` deaths in a
        row within ``stable_s`` of their start (0: at once)."""
        if quick_deaths <= 0:
            return 0.0
        return min(self.backoff_max_s, self.backoff_s * 2.0 ** min(quick_deaths - 1, 32))


@dataclass
class Child:
    slot: int
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    #: Consecutive deaths within stable_s of a start (the back-off's exponent).
    quick_deaths: int = 0
    #: When a dead child may be started again (time.monotonic()).
    restart_at: float = 0.0


class Supervisor:
    def __init__(
        self, settings: Settings, argv: Sequence[str], config: SupervisorConfig, workdir: Path
    ) -> None:
        self.settings = settings
        self.argv = list(argv)
        self.config = config
        self.workdir = workdir
        self.metrics_dir = workdir / "metrics"
        self.metrics_dir.mkdir()
        self.children = [Child(slot) for slot in range(config.processes)]
        self.ledgers = [
            PgLedger(async_engine(db, "ledgerq-supervisor", pool_size=1))
            for db in settings.ledger_shards()
        ]
        self.fatal: int | None = None

    def _report(self, child: Child) -> Path:
        return self.workdir / f"child-{child.slot}.report"

    def spawn(self, child: Child) -> None:
        env = service_env(self.settings)
        env.pop("LEDGERQ_METRICS_PORT", None)
        env["PROMETHEUS_MULTIPROC_DIR"] = str(self.metrics_dir)
        env[SUPERVISED_ENV] = str(self._report(child))
        self._report(child).unlink(missing_ok=True)
        child.proc = subprocess.Popen([sys.executable, "-m", "ledgerq", *self.argv], env=env)
        child.started = time.monotonic()
        log.info("child %d started (pid %d)", child.slot, child.proc.pid)

    def running(self) -> int:
        return sum(c.proc is not None and c.proc.poll() is None for c in self.children)

    async def look(self) -> None:
        """Reap the children that died; start those whose back-off is over."""
        now = time.monotonic()
        for child in self.children:
            if child.proc is None:
                if now >= child.restart_at:
                    self.spawn(child)
                continue
            code = child.proc.poll()
            if code is None:
                continue
            pid, child.proc = child.proc.pid, None
            if code in FATAL_CODES:
                log.error("child %d (pid %d) exited %d: stopping", child.slot, pid, code)
                self.fatal = code
                return
            hard_stopped = code == EXIT_HUNG and await self.settle(child, pid)
            lived = now - child.started
            child.quick_deaths = (
                0 if hard_stopped or lived >= self.config.stable_s else (child.quick_deaths + 1)
            )
            delay = self.config.restart_delay(child.quick_deaths)
            child.restart_at = now + delay
            log.warning(
                "child %d (pid %d) %s after %.1f s; restarting it in %.1f s",
                child.slot,
                pid,
                "was stopped at a sync handler's timeout"
                if hard_stopped
                else f"died ({_describe(code)})",
                lived,
                delay,
            )

    async def settle(self, child: Child, pid: int) -> bool:
        """:meth:`settle_timed_out`; if the database does not answer, its running rows
        are left to the reconciler (False)."""
        try:
            return await self.settle_timed_out(child, pid)
        except Exception as exc:
            log.warning(
                "child %d (pid %d) stopped at a sync timeout, but its tasks could not be "
                "settled (%s: %s): the reconciler will judge them",
                child.slot,
                pid,
                type(exc).__name__,
                str(exc).splitlines()[0] if str(exc) else "",
            )
            return False

    async def settle_timed_out(self, child: Child, pid: int) -> bool:
        """A child ended by its hung watchdog: charge the task its report names,
        release the others it had running (module docstring). False if the report
        names none (then the reconciler judges them)."""
        try:
            lines = self._report(child).read_text(errors="replace").splitlines()
        except FileNotFoundError:
            return False
        culprits = {int(m.group(1)) for line in lines if (m := _CULPRIT.match(line))}
        if not culprits:
            return False
        prefix = f"{socket.gethostname()}:{pid}:"
        charged = released = 0
        for ledger in self.ledgers:
            async with ledger.engine.connect() as conn:
                rows = (await conn.execute(Q.running_of_process, {"prefix": prefix})).all()
            outcomes = [
                Outcome.failed(
                    (row.id, row.epoch),
                    "timed out: its sync handler was stopped with its process "
                    "(ledgerq worker --processes)",
                    delay=RetryPolicy.from_json(row.retry).delay_for(row.attempts),
                )
                if row.id in culprits
                else Outcome(
                    row.id,
                    row.epoch,
                    "release",
                    "released uncharged: a sibling's sync handler timed out and their "
                    "process was replaced",
                )
                for row in rows
            ]
            for finished in await ledger.finish(outcomes):
                if finished.id in culprits:
                    charged += 1
                else:
                    released += 1
        log.warning(
            "child %d (pid %d): task %s timed out and was charged (%d); %d others released",
            child.slot,
            pid,
            ", ".join(map(str, sorted(culprits))),
            charged,
            released,
        )
        return True

    async def drain(self) -> int:
        """Forward SIGTERM to every child and wait for them (module docstring)."""
        running = [(c, c.proc) for c in self.children if c.proc is not None]
        for _, proc in running:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + self.config.grace_s + DRAIN_SLACK_S
        codes: list[int] = []
        for child, proc in running:
            try:
                code = await asyncio.to_thread(proc.wait, max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("child pid %d still running past the grace: killing it", proc.pid)
                proc.kill()
                code = await asyncio.to_thread(proc.wait)
            # A sync handler that timed out during the drain ended its child: settled
            # here as in look() (then nothing is left unwritten).
            if code == EXIT_HUNG and await self.settle(child, proc.pid):
                code = 0
            codes.append(0 if code == -signal.SIGTERM else code)
        problems = [code for code in codes if code]
        return 0 if not problems else (problems[0] if problems[0] > 0 else 1)

    async def dispose(self) -> None:
        for ledger in self.ledgers:
            await ledger.dispose()


def _describe(code: int) -> str:
    return f"signal {signal.Signals(-code).name}" if code < 0 else f"exit {code}"


@contextlib.asynccontextmanager
async def _endpoint(port: int, supervisor: Supervisor) -> AsyncIterator[Health | None]:
    if not port:
        yield None
        return
    from ledgerq import metrics  # only with a metrics port (as compose.monitoring)

    health = Health()
    server = metrics.MetricsServer(
        port, health, metrics.multiprocess_registry(str(supervisor.metrics_dir))
    )
    health.start_ticking()
    n = supervisor.config.processes

    async def ready() -> str | None:
        up = supervisor.running()
        return None if up == n else f"{up} of {n} worker processes running"

    health.watch(ready)
    log.info("supervisor: /metrics, /healthz and /readyz on port %d", server.port)
    try:
        yield health
    finally:
        await health.close()
        server.close()


async def supervise(
    settings: Settings, argv: Sequence[str], config: SupervisorConfig, metrics_port: int = 0
) -> int:
    """Run ``config.processes`` children (``python -m ledgerq *argv``) until SIGTERM,
    then drain them; returns the exit code (module docstring)."""
    workdir = Path(tempfile.mkdtemp(prefix="ledgerq-processes-"))
    supervisor = Supervisor(settings, argv, config, workdir)
    try:
        async with _endpoint(metrics_port, supervisor) as health:
            stop = stop_event(*([health.stopping] if health else []))
            log.info("supervisor: %d worker processes (pid %d)", config.processes, os.getpid())
            try:
                while not stop.is_set() and supervisor.fatal is None:
                    await supervisor.look()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), POLL_S)
            finally:  # whatever ended the loop, the children drain (never orphaned)
                log.info("supervisor: stopping %d worker processes", supervisor.running())
                code = await supervisor.drain()
            return supervisor.fatal or code
    finally:
        await supervisor.dispose()
        shutil.rmtree(workdir, ignore_errors=True)
