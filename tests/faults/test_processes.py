"""``ledgerq worker --processes N`` (issue 26, item 5), real processes on the real
database and the fault suite's broker: a SIGKILLed child is replaced and its
tasks still run once; SIGTERM to the supervisor mid-task (and while its children
start) drains every child and exits 0; a sync handler past its timeout is
stopped with its process (its marker line never written), charged one attempt,
while the sibling it shared the process with is released uncharged; one
metrics endpoint for all the children; ``--processes 0`` is a usage error.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ledgerq import RetryPolicy, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import enqueue_committed
from tests.pki import free_port
from tests.support import ledgerq, ledgerq_env, until

APP = ("--app", "tests.apps.process_app")
#: Each test takes 10-50 s on a loaded two-core machine: real processes start.
pytestmark = pytest.mark.timeout(300)
SLACK_S = 5.0
_STARTED = re.compile(r"child (\d+) started \(pid (\d+)\)")


@dataclass
class Proc:
    """A ``ledgerq -v`` process (the supervisor's children log to the same file)."""

    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int = 0

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def children(self) -> dict[int, int]:
        """Slot -> pid of the latest start of each child."""
        return {int(m.group(1)): int(m.group(2)) for m in _STARTED.finditer(self.text())}

    def consuming(self) -> int:
        return self.text().count(" consuming ")

    async def exit(self, within: float) -> int:
        try:
            return await asyncio.to_thread(self.proc.wait, within)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"still running after {within:g} s:\n{self.text()[-4000:]}")


Start = Callable[..., Proc]


@pytest.fixture
async def start(settings: Settings, tmp_path: Path) -> AsyncIterator[Start]:
    procs: list[Proc] = []

    def start(*args: str, metrics: bool = False) -> Proc:
        log = tmp_path / f"proc-{len(procs)}.log"
        port = free_port() if metrics else 0
        extra = ("--metrics-port", str(port)) if metrics else ()
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ledgerq", "-v", *args, *extra],
                env=ledgerq_env(settings),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        procs.append(Proc(proc, log, port))
        return procs[-1]

    yield start
    for p in procs:
        if p.proc.poll() is None:
            p.proc.send_signal(signal.SIGTERM)
    for p in procs:
        try:
            p.proc.wait(20)
        except subprocess.TimeoutExpired:
            p.proc.kill()
            p.proc.wait()


def work(tmp_path: Path, n: int, seconds: float) -> list[TaskSpec]:
    return [TaskSpec("proc.work", {"dir": str(tmp_path), "seconds": seconds}) for _ in range(n)]


def runs(tmp_path: Path, task_id: int, what: str = "done") -> list[str]:
    path = tmp_path / f"{task_id}.{what}"
    return path.read_text().splitlines() if path.exists() else []


async def status(ledger: PgLedger, task_id: int) -> str:
    return str((await ledger.show(task_id))["status"])


async def all_status(ledger: PgLedger, ids: list[int], wanted: str) -> bool:
    return {await status(ledger, i) for i in ids} == {wanted}


def test_processes_zero_or_negative_is_one_line_and_exit_64(settings: Settings) -> None:
    for value in ("0", "-2"):
        done = ledgerq(settings, "worker", *APP, "--processes", value)
        assert done.returncode == 64, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "--processes" in lines[0], done.stderr
        assert "started" not in done.stdout + done.stderr


async def test_a_sigkilled_child_is_replaced_and_its_tasks_run_once(
    settings: Settings, ledger: PgLedger, start: Start, tmp_path: Path
) -> None:
    supervisor = start("worker", *APP, "--processes", "2", "--concurrency", "2", metrics=True)
    start("relay", "--poll-interval", "0.2")
    start("reconcile", "--every", "1")
    await until("both children consuming", lambda: supervisor.consuming() >= 2, 60)
    ids = enqueue_committed(settings, work(tmp_path, 6, seconds=2.0))
    await until("four running", lambda: _count_running(ledger, ids, 4), 30)
    victim = supervisor.children()[0]
    subprocess.run(["kill", "-KILL", str(victim)], check=True)
    await until("child 0 replaced", lambda: supervisor.children()[0] != victim, 30)
    await until("all succeeded", lambda: all_status(ledger, ids, "succeeded"), 120)
    assert "died (signal SIGKILL)" in supervisor.text()
    assert [len(runs(tmp_path, i)) for i in ids] == [1] * len(ids)
    # One endpoint for both children: the claims of every process are summed.
    url = f"http://127.0.0.1:{supervisor.metrics_port}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    claimed = [line for line in text.splitlines() if line.startswith("ledgerq_claimed_total")]
    assert claimed and float(claimed[0].split()[-1]) >= len(ids), text[:2000]
    supervisor.proc.send_signal(signal.SIGTERM)
    assert await supervisor.exit(30 + SLACK_S) == 0, supervisor.text()[-4000:]


async def _count_running(ledger: PgLedger, ids: list[int], n: int) -> bool:
    return sum([await status(ledger, i) == "running" for i in ids]) >= n


async def test_sigterm_mid_task_drains_every_child_and_exits_0(
    settings: Settings, ledger: PgLedger, start: Start, tmp_path: Path
) -> None:
    supervisor = start("worker", *APP, "--processes", "2", "--concurrency", "2", "--grace", "10")
    start("relay", "--poll-interval", "0.2")
    await until("both children consuming", lambda: supervisor.consuming() >= 2, 60)
    ids = enqueue_committed(settings, work(tmp_path, 4, seconds=2.0))
    await until("all running", lambda: all_status(ledger, ids, "running"), 30)
    pids = {str(pid) for pid in supervisor.children().values()}
    signalled = time.monotonic()
    supervisor.proc.send_signal(signal.SIGTERM)
    code = await supervisor.exit(10 + SLACK_S)
    assert code == 0, supervisor.text()[-4000:]
    print(f"drained in {time.monotonic() - signalled:.1f} s")
    assert await all_status(ledger, ids, "succeeded")
    done = [runs(tmp_path, i) for i in ids]
    assert all(len(d) == 1 for d in done) and {d[0] for d in done} == pids  # both drained
    assert "Traceback" not in supervisor.text()


async def test_sigterm_while_children_start_exits_0(start: Start) -> None:
    supervisor = start("worker", *APP, "--processes", "2")
    await until("a child started", lambda: len(supervisor.children()) == 2, 30)
    supervisor.proc.send_signal(signal.SIGTERM)
    assert await supervisor.exit(SLACK_S + 5) == 0, supervisor.text()[-4000:]
    assert "Traceback" not in supervisor.text()


async def test_a_sync_handler_past_its_timeout_is_stopped_and_only_it_is_charged(
    settings: Settings, ledger: PgLedger, start: Start, tmp_path: Path
) -> None:
    # One child with two slots: the hung task and its sibling share a process.
    supervisor = start("worker", *APP, "--processes", "1", "--concurrency", "2")
    start("relay", "--poll-interval", "0.2")
    await until("the child consuming", lambda: supervisor.consuming() >= 1, 60)
    [sibling] = enqueue_committed(settings, work(tmp_path, 1, seconds=4.0))
    await until("the sibling running", lambda: _count_running(ledger, [sibling], 1), 30)
    [hung] = enqueue_committed(
        settings,
        [
            TaskSpec(
                "proc.hang",
                {"dir": str(tmp_path), "seconds": 3.0},
                max_attempts=3,
                retry=RetryPolicy.fixed(3600),
            )
        ],
    )
    first = supervisor.children()[0]
    await until("the child replaced", lambda: supervisor.children()[0] != first, 30)
    # The sibling was released, ran again in the new child and succeeded; by then
    # (4 s) the hung handler's marker (3 s) would have been written had it run on.
    await until("the sibling succeeded", lambda: _is(ledger, sibling, "succeeded"), 120)
    assert runs(tmp_path, hung, "started") == [f"{first} 1"]
    assert runs(tmp_path, hung, "after") == []
    shown: dict[str, Any] = await ledger.show(hung)
    assert (shown["status"], shown["attempts"]) == ("pending", 1), shown
    assert "timed out" in str(shown["last_error"])
    sib: dict[str, Any] = await ledger.show(sibling)
    assert sib["attempts"] == 1, sib  # the released run was not charged
    assert len(runs(tmp_path, sibling)) == 1
    assert "timed out and was charged" in supervisor.text()


async def _is(ledger: PgLedger, task_id: int, wanted: str) -> bool:
    return await status(ledger, task_id) == wanted


def _gone(pid: int) -> bool:
    """Exited (or a zombie nobody reaped: init in a container may not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


async def test_children_stop_when_their_supervisor_is_killed(
    settings: Settings, ledger: PgLedger, start: Start, tmp_path: Path
) -> None:
    supervisor = start("worker", *APP, "--processes", "2", "--concurrency", "2", "--grace", "10")
    start("relay", "--poll-interval", "0.2")
    await until("both children consuming", lambda: supervisor.consuming() >= 2, 60)
    ids = enqueue_committed(settings, work(tmp_path, 2, seconds=2.0))
    await until("both running", lambda: all_status(ledger, ids, "running"), 30)
    pids = list(supervisor.children().values())
    supervisor.proc.kill()
    await until("both children exited", lambda: all(_gone(pid) for pid in pids), 30)
    # They drained: what they ran finished, once.
    assert await all_status(ledger, ids, "succeeded")
    assert [len(runs(tmp_path, i)) for i in ids] == [1, 1]
    assert supervisor.text().count("the supervisor is gone; stopping") == 2
