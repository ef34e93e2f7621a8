"""A private PostgreSQL server, for the fault tests that restart their database.

The machine's server (127.0.0.1:5432) is shared: by the other engineers, and in
CI by the test groups running beside the fault suite. It must never be
restarted. A test that restarts PostgreSQL gets a server of its own instead:
the installed binaries (``/usr/lib/postgresql/<version>/bin``), ``initdb`` into
a directory of its own (owner-marked like the private RabbitMQ nodes', so a
killed test run's copy is reaped by the next), on a free port, trust auth on
127.0.0.1 only, started and restarted with ``pg_ctl`` and stopped (``-m
immediate``: its data is thrown away) at the end. PostgreSQL refuses to run as
root, so as root it runs as ``postgres``.

``fsync`` is off: a restart here is ``pg_ctl restart -m fast`` (a clean shutdown,
its checkpoint written), which loses nothing; only an OS crash would, and the
data dies with the test anyway.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from tests.pki import free_port
from tests.rabbit import as_user, chown, wait_for_port

#: The newest installed server's binaries (None: no server installed).
BIN = max(Path("/usr/lib/postgresql").glob("*/bin"), default=None, key=lambda p: int(p.parent.name))


def available() -> bool:
    return BIN is not None and (BIN / "pg_ctl").exists()


@dataclass
class PgServer:
    home: Path
    port: int = 0

    @property
    def data(self) -> Path:
        return self.home / "data"

    def url(self, database: str) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str, timeout: float = 120.0) -> str:
        assert BIN is not None
        done = subprocess.run(
            [*as_user("postgres"), str(BIN / args[0]), *args[1:]],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip
        if done.returncode:
            raise RuntimeError(f"{args[0]} failed ({done.returncode}): {done.stderr[-2000:]}")
        return done.stdout

    def pg_ctl(self, *args: str) -> str:
        log = str(self.home / "postgres.log")
        return self._run("pg_ctl", "-D", str(self.data), "-l", log, "-w", "-t", "60", *args)

    def start(self) -> PgServer:
        self.port = free_port()
        chown(self.home, "postgres")
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(
                f"port = {self.port}\nlisten_addresses = '127.0.0.1'\n"
                f"unix_socket_directories = '{self.home}'\n"
                "max_connections = 100\nshared_buffers = 64MB\nfsync = off\n"
                "synchronous_commit = off\nfull_page_writes = off\n"
            )
        self.pg_ctl("start")
        # The pid file reap_orphans looks for (tests/rabbit.py): the postmaster's.
        pid = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
        (self.home / "pid").write_text(pid)
        wait_for_port(self.port, 30)
        return self

    def restart(self) -> None:
        """``pg_ctl restart -m fast``: every connection is cut, the server is back
        (accepting connections) when it returns."""
        self.pg_ctl("restart", "-m", "fast")
        pid = (self.data / "postmaster.pid").read_text().split("\n", 1)[0]
        (self.home / "pid").write_text(pid)

    def create_database(self, name: str) -> str:
        """Create (or re-create) ``name``; its SQLAlchemy URL."""
        dsn = f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url(name)

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self.pg_ctl("stop", "-m", "immediate")

    def log(self) -> str:
        path = self.home / "postgres.log"
        return path.read_text(errors="replace") if path.exists() else ""
