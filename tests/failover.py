"""A highly available PostgreSQL of the test's own, for failover faults.

pg_auto_failover from the OS packages (Debian's ``pg-auto-failover-cli`` and
``postgresql-<major>-auto-failover``, which ``scripts/test.sh`` installs): a
monitor, a primary and a standby, each a ``pg_autoctl create ... --run``
keeper with its PostgreSQL, on ports of their own, in one temp directory
(``XDG_*`` point into it, so no keeper state lands in the user's home). The
standby is synchronous: pg_auto_failover sets ``synchronous_standby_names`` to
``ANY 1 (standby)`` once it is a healthy secondary, and ``synchronous_commit``
is on, so a commit the primary acknowledged is on the standby's disk.

Clients reach it through a multi-host URL (:meth:`HaPostgres.url`:
``?host=a:p1&host=b:p2&target_session_attrs=read-write``): libpq tries the
hosts in order and keeps the one that accepts writes, so after a failover a new
connection lands on the promoted standby.

The monitor's health checks are tightened (1 s period, a node unhealthy after
3 s without a report, 2 s to wait for the old primary to demote itself,
against 20 s and 30 s by default) so a test's failover takes seconds; the
2 s demote timeout is only safe because the killed primary is gone for good
(a real deployment keeps it above the keepers' network-partition timeout, or
an isolated old primary could still take writes).

:meth:`HaPostgres.kill` SIGKILLs a node's keeper and its PostgreSQL together
(the machine is lost). PostgreSQL refuses to run as root, so as root every
process runs as ``postgres``. Each keeper runs in a session of its own, so a
node is stopped, or killed, as one process group; a directory left by a killed
test run is reaped by the next one (every process whose command line names it).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from tests.pki import free_port
from tests.rabbit import as_user, chown, workdir

PG_AUTOCTL = Path("/usr/bin/pg_autoctl")
PREFIX = "ledgerq-failover-"
#: The monitor's settings (milliseconds): see the module docstring.
MONITOR_SETTINGS = {
    "pgautofailover.health_check_period": 1000,
    "pgautofailover.health_check_timeout": 1000,
    "pgautofailover.health_check_max_retries": 1,
    "pgautofailover.health_check_retry_delay": 500,
    "pgautofailover.node_considered_unhealthy_timeout": 3000,
    "pgautofailover.primary_demote_timeout": 2000,
}


def pg_bin() -> Path | None:
    """The newest installed PostgreSQL whose pg_auto_failover extension is installed."""
    found = None
    for bin_dir in sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=_major):
        extensions = Path("/usr/share/postgresql") / bin_dir.parent.name / "extension"
        if (extensions / "pgautofailover.control").exists():
            found = bin_dir
    return found


def _major(path: Path) -> int:
    name = path.parent.name
    return int(name) if name.isdigit() else 0


def available() -> bool:
    return PG_AUTOCTL.exists() and pg_bin() is not None


def reap_orphans() -> None:
    """Kill the processes of, and remove, failover directories whose test run is gone."""
    for path in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        owner = path / "owner"
        if not owner.is_file() or Path(f"/proc/{owner.read_text() or '0'}").exists():
            continue
        needle = str(path).encode()
        for proc in Path("/proc").glob("[0-9]*"):
            try:
                if needle in (proc / "cmdline").read_bytes():
                    os.kill(int(proc.name), signal.SIGKILL)
            except (OSError, ValueError):
                pass
        shutil.rmtree(path, ignore_errors=True)


@dataclass
class Node:
    name: str
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None


@dataclass
class HaPostgres:
    home: Path
    monitor: Node = field(default_factory=lambda: Node("monitor"))
    nodes: list[Node] = field(default_factory=lambda: [Node("node1"), Node("node2")])

    def url(self, database: str) -> str:
        """The multi-host URL of ``database``: every data node, the writable one wins."""
        hosts = "&".join(f"host=127.0.0.1:{n.port}" for n in self.nodes)
        return f"postgresql+psycopg://postgres@/{database}?{hosts}&target_session_attrs=read-write"

    def _command(self, *args: str) -> list[str]:
        bin_dir = pg_bin()
        assert bin_dir is not None
        env = {
            "XDG_CONFIG_HOME": self.home / "config",
            "XDG_DATA_HOME": self.home / "data",
            "XDG_RUNTIME_DIR": self.home / "run",
            "PATH": f"{bin_dir}:/usr/bin:/bin",
        }
        return [*as_user("postgres"), "env", *(f"{k}={v}" for k, v in env.items()),
                str(PG_AUTOCTL), *args, "--pgctl", str(bin_dir / "pg_ctl")]  # fmt: skip

    def _run(self, node: Node, *create: str) -> None:
        log = (self.home / f"{node.name}.log").open("ab")
        node.process = subprocess.Popen(
            self._command("create", *create, "--pgdata", str(self.home / node.name),
                          "--pgport", str(node.port), "--hostname", "127.0.0.1",
                          "--auth", "trust", "--no-ssl", "--run"),
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def start(self, timeout: float = 120.0) -> HaPostgres:
        for sub in ("config", "data", "run"):
            (self.home / sub).mkdir(mode=0o700, exist_ok=True)
        chown(self.home, "postgres")
        self._run(self.monitor, "monitor")
        self._wait(lambda: self._monitor_ready(), timeout, "the monitor")
        with self._connect(self.monitor.port, "pg_auto_failover") as conn:
            for name, value in MONITOR_SETTINGS.items():
                conn.execute(f"ALTER SYSTEM SET {name} = {value}")
            conn.execute("SELECT pg_reload_conf()")
        monitor = (
            f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover"
            "?sslmode=disable"
        )
        # Both at once: the first to register becomes the primary, the other waits
        # for it and clones it.
        for node in self.nodes:
            self._run(node, "postgres", "--name", node.name, "--monitor", monitor)
        want = ["primary", "secondary"]
        self._wait(lambda: sorted(self.states().values()) == want, timeout, f"states {want}")
        return self

    def _connect(self, port: int, database: str = "postgres") -> psycopg.Connection[Any]:
        return psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname=database,
            connect_timeout=2, autocommit=True,
        )  # fmt: skip

    def _monitor_ready(self) -> bool:
        try:
            with self._connect(self.monitor.port, "pg_auto_failover") as conn:
                conn.execute("SELECT count(*) FROM pgautofailover.node")
            return True
        except psycopg.Error:
            return False

    def _wait(self, ready: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} not ready in {timeout:.0f}s: {self.states()}")
            time.sleep(0.2)

    def states(self) -> dict[str, str]:
        """Each data node's state as it last reported it to the monitor."""
        try:
            with self._connect(self.monitor.port, "pg_auto_failover") as conn:
                rows = conn.execute("SELECT nodename, reportedstate FROM pgautofailover.node")
                return {str(name): str(state) for name, state in rows}
        except psycopg.Error:
            return {}

    def writable(self) -> Node | None:
        """The data node that accepts writes now, if any."""
        for node in self.nodes:
            try:
                with self._connect(node.port) as conn:
                    row = conn.execute("SELECT pg_is_in_recovery()").fetchone()
            except psycopg.Error:
                continue
            if row is not None and not row[0]:
                return node
        return None

    def synchronous_standbys(self, node: Node) -> str:
        with self._connect(node.port) as conn:
            row = conn.execute("SHOW synchronous_standby_names").fetchone()
        return str(row[0]) if row else ""

    def kill(self, node: Node) -> None:
        """SIGKILL the node's keeper and its PostgreSQL at once (the machine is lost)."""
        assert node.process is not None
        os.killpg(node.process.pid, signal.SIGKILL)
        node.process.wait(30)

    def wait_writable(self, other_than: Node, timeout: float = 120.0) -> Node:
        """Wait until a node other than ``other_than`` accepts writes (promoted)."""
        deadline = time.monotonic() + timeout
        while True:
            node = self.writable()
            if node is not None and node is not other_than:
                return node
            if time.monotonic() > deadline:
                raise AssertionError(f"no standby promoted in {timeout:.0f}s: {self.states()}")
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM every keeper (it stops its PostgreSQL), then SIGKILL what is left."""
        members = [*self.nodes, self.monitor]
        for node in members:
            if node.process is not None and node.process.poll() is None:
                os.killpg(node.process.pid, signal.SIGTERM)
        for node in members:
            if node.process is None:
                continue
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.process.wait(30)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.process.pid, signal.SIGKILL)  # stragglers of the group
            node.process.wait(30)

    def log(self) -> str:
        return "\n".join(
            f"--- {path.name}\n" + path.read_text(errors="replace")[-4000:]
            for path in sorted(self.home.glob("*.log"))
        )


def start(timeout: float = 120.0) -> HaPostgres:
    """A new cluster in a fresh owner-marked directory (orphans of killed runs reaped)."""
    reap_orphans()
    cluster = HaPostgres(workdir(PREFIX))
    try:
        return cluster.start(timeout)
    except BaseException:
        cluster.stop()
        raise
