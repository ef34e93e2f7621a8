"""Private RabbitMQ nodes for tests that stop, restart or reconfigure their broker.

The machine's own node (127.0.0.1:5672) is shared: by the rest of the suite,
and by anyone else working on the machine. A test that runs ``stop_app`` or
lowers ``consumer_timeout`` on it would break whatever else is using it at that
moment. Such tests get a node of their own instead: same installed server, its
own node name, ports, data directory, log directory and Erlang cookie (``HOME``
is the node's directory), started detached and stopped afterwards.

PostgreSQL and RabbitMQ refuse to run as root, so when the suite runs as root
the node runs as the ``rabbitmq`` user, and its directory is handed to it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from tests.pki import free_port

RABBITMQ_BIN = Path("/usr/lib/rabbitmq/bin")
#: The programs whose private copies tests start, as their command lines show them
#: (a ``pid`` file of a dead test's directory is only acted on for these).
SERVERS = (b"beam", b"pgbouncer", b"postgresql")


def available() -> bool:
    return (RABBITMQ_BIN / "rabbitmq-server").exists()


def as_user(user: str) -> list[str]:
    """Run as ``user`` when we are root (PostgreSQL and RabbitMQ refuse root)."""
    return ["runuser", "-u", user, "--"] if os.geteuid() == 0 else []


def chown(path: Path, user: str) -> None:
    if os.geteuid() == 0:
        for item in [path, *path.rglob("*")]:
            shutil.chown(item, user, user)


def wait_for_port(port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def workdir(prefix: str) -> Path:
    """A directory the server users can reach (pytest's own tmp is root-only),
    marked with this process's pid. Directories of ``prefix`` left by a test
    process that no longer runs (killed, so its fixtures never stopped their
    nodes) are reaped first: their node is killed and the directory removed."""
    reap_orphans(prefix)
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    (path / "owner").write_text(str(os.getpid()))
    return path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def reap_orphans(prefix: str) -> list[Path]:
    """Kill the nodes of, and remove, ``prefix`` directories whose owner is gone."""
    reaped = []
    for path in Path(tempfile.gettempdir()).glob(prefix + "*"):
        owner = path / "owner"
        if not owner.is_file() or _alive(int(owner.read_text() or "0")):
            continue
        for pid_file in path.rglob("pid"):
            pid = int(pid_file.read_text().strip() or "0")
            command = Path(f"/proc/{pid}/cmdline")
            if pid and command.exists() and any(p in command.read_bytes() for p in SERVERS):
                os.kill(pid, 9)
        shutil.rmtree(path, ignore_errors=True)
        reaped.append(path)
    return reaped


@dataclass
class RabbitNode:
    """One private node. ``config`` is the text of its ``rabbitmq.conf``; by default
    a plain listener on ``port``, reachable as guest from 127.0.0.1."""

    home: Path
    name: str = field(default_factory=lambda: f"lq{os.getpid()}x{free_port()}@localhost")
    port: int = field(default_factory=free_port)
    config: str | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def _env(self) -> dict[str, str]:
        return {
            "HOME": str(self.home),  # its own Erlang cookie
            "RABBITMQ_CONF_ENV_FILE": str(self.home / "rabbitmq-env.conf"),
            "RABBITMQ_NODENAME": self.name,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(free_port()),
            "RABBITMQ_MNESIA_BASE": str(self.home / "mnesia"),
            "RABBITMQ_LOG_BASE": str(self.home / "log"),
            "RABBITMQ_CONFIG_FILE": str(self.home / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(self.home / "enabled_plugins"),
            "RABBITMQ_PID_FILE": str(self.home / "pid"),
            "ERL_EPMD_ADDRESS": "127.0.0.1",
        }

    def _command(self) -> list[str]:
        return [*as_user("rabbitmq"), "env", *(f"{k}={v}" for k, v in self._env().items())]

    def start(self, timeout: float = 60.0) -> RabbitNode:
        self.home.mkdir(parents=True, exist_ok=True)
        config = self.config
        if config is None:
            config = f"listeners.tcp.default = 127.0.0.1:{self.port}\nloopback_users = none\n"
        (self.home / "rabbitmq.conf").write_text(config)
        (self.home / "enabled_plugins").write_text("[].\n")
        (self.home / "rabbitmq-env.conf").write_text("")  # not the main node's /etc one
        chown(self.home, "rabbitmq")
        subprocess.run(
            [*self._command(), str(RABBITMQ_BIN / "rabbitmq-server"), "-detached"],
            check=True,
            capture_output=True,
            timeout=60,
        )
        wait_for_port(self.port, timeout)
        self.ctl("await_startup")
        return self

    def ctl(self, *args: str, timeout: float = 120.0) -> str:
        """``rabbitmqctl -n <this node> args...``; its standard output."""
        done = subprocess.run(
            [*self._command(), str(RABBITMQ_BIN / "rabbitmqctl"), "-n", self.name, *args],
            check=True,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return done.stdout

    def stop(self) -> None:
        try:
            self.ctl("stop", timeout=60)
        except subprocess.SubprocessError:
            pid_file = self.home / "pid"
            if pid_file.exists():  # the node we started, by its pid
                os.kill(int(pid_file.read_text().strip()), 9)


@dataclass
class RabbitCluster:
    """``size`` private nodes joined into one cluster: one Erlang cookie, each node
    its own name, ports and directory (``home/node0`` ...). ``url`` lists every
    node, first node first, as ``LEDGERQ_AMQP_URL`` takes them."""

    home: Path
    size: int = 3
    nodes: list[RabbitNode] = field(default_factory=list)

    @property
    def url(self) -> str:
        return ",".join(node.url for node in self.nodes)

    def start(self) -> RabbitCluster:
        cookie = secrets.token_hex(20).upper()
        self.nodes = [RabbitNode(self.home / f"node{i}") for i in range(self.size)]
        for node in self.nodes:
            node.home.mkdir(parents=True, exist_ok=True)
            path = node.home / ".erlang.cookie"  # HOME is the node's directory
            path.write_text(cookie)
            path.chmod(0o400)
        with ThreadPoolExecutor(self.size) as pool:  # booting is the slow part: at once
            list(pool.map(RabbitNode.start, self.nodes))
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("join_cluster", self.nodes[0].name)
            node.ctl("start_app")
            node.ctl("await_startup")
        running = self.nodes[0].ctl("cluster_status", "--formatter", "json")
        missing = [n.name for n in self.nodes if n.name not in running]
        assert not missing, f"nodes not in the cluster: {missing}"
        return self

    def stop(self) -> None:
        for node in reversed(self.nodes):
            node.stop()
