"""A private PgBouncer in transaction pooling mode, in front of the suite's PostgreSQL.

Started by the tests that need it (Debian's ``pgbouncer`` package, which
``scripts/test.sh`` installs), on a free port, with its own directory (the same
owner-marked kind as the private RabbitMQ nodes', so a killed test run's copy is
reaped by the next), and stopped afterwards. It refuses to run as root, so as
root it runs as ``postgres``.

Its pool is deliberately smaller than the clients ledgerq opens, so every test
through it multiplexes: a client that relied on session state (a prepared
statement, a LISTEN, a session-level lock, a startup option) would meet another
client's server connection.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from tests.pki import free_port
from tests.rabbit import as_user, chown, wait_for_port

PGBOUNCER = Path("/usr/sbin/pgbouncer")
#: Server connections per (database, user): fewer than the clients a test opens.
POOL_SIZE = 3


def available() -> bool:
    return PGBOUNCER.exists()


@dataclass
class PgBouncer:
    home: Path
    server_url: str
    port: int = 0
    process: subprocess.Popen[bytes] | None = None

    def url(self) -> str:
        """The server URL with PgBouncer's address instead of PostgreSQL's."""
        url = make_url(self.server_url).set(host="127.0.0.1", port=self.port)
        return url.render_as_string(hide_password=False)

    def start(self, timeout: float = 30.0) -> PgBouncer:
        server = make_url(self.server_url)
        self.port = free_port()
        self.home.mkdir(parents=True, exist_ok=True)
        (self.home / "userlist.txt").write_text(f'"{server.username or "postgres"}" ""\n')
        (self.home / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={server.host or '127.0.0.1'} port={server.port or 5432}\n"
            "[pgbouncer]\n"
            f"listen_addr = 127.0.0.1\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.home / 'userlist.txt'}\n"
            f"pool_mode = transaction\ndefault_pool_size = {POOL_SIZE}\n"
            "max_client_conn = 200\n"
            f"admin_users = {server.username or 'postgres'}\n"
            f"logfile = {self.home / 'pgbouncer.log'}\npidfile = {self.home / 'pid'}\n"
        )
        chown(self.home, "postgres")
        self.process = subprocess.Popen(
            [*as_user("postgres"), str(PGBOUNCER), str(self.home / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, timeout)
        return self

    def show(self, what: str) -> list[dict[str, str]]:
        """``SHOW <what>`` on the admin console (simple query protocol only: psql)."""
        done = subprocess.run(
            ["psql", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d",
             "pgbouncer", "--csv", "-c", f"SHOW {what}"],
            check=True, capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        header, *rows = done.stdout.strip().splitlines()
        names = header.split(",")
        return [dict(zip(names, row.split(","), strict=False)) for row in rows]

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def log(self) -> str:
        path = self.home / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""
