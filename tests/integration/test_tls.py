"""TLS end to end: a PostgreSQL cluster with ``ssl=on`` and a RabbitMQ node with only
a TLS listener, both started here, with certificates from a throwaway CA.

The servers are private to this module (free ports, a temporary directory, the
main PostgreSQL on 5432 and RabbitMQ node on 5672 untouched) and are stopped
and deleted at the end, whatever happened. The CA is made with the ``openssl``
command line. The cluster accepts TCP connections only over TLS (``hostssl``)
and the node has no plain listener, so a task that goes through proves every
connection ledgerq opened was TLS: the relay and the worker (aio-pika), the
reconciler (pika), the engines, LISTEN/NOTIFY and the migration (libpq).

The failures: an ``amqps://`` URL without ``LEDGERQ_AMQP_CA_FILE`` (the system's
CAs do not know the test CA) or with another CA stops relay and reconcile at
once with one line and exit 69; a database URL whose ``sslrootcert`` is another
CA stops a command with one line and exit 69; a missing CA file is exit 78.
"""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.compose import open_reconciler, open_relay
from ledgerq.core.config import ConfigError, Settings
from ledgerq.core.errors import ServiceUnavailableError
from ledgerq.ledger.pg.engines import connect_waiting, libpq_url
from ledgerq.ledger.pg.migrate import upgrade
from ledgerq.ledger.pg.notify import Wakeup
from ledgerq.relay.reconciler import ReconcilerConfig
from tests import rabbit
from tests.harness import Pipeline, enqueue_committed
from tests.pki import Pki, free_port, make_pki, run
from tests.rabbit import RabbitNode, as_user, chown
from tests.support import ledgerq

PG_BIN = Path("/usr/lib/postgresql/15/bin")
#: In the database URL (the test cluster trusts everyone): it must never be printed.
DB_PASSWORD = "Tls-pw-4417"
EX_UNAVAILABLE, EX_CONFIG = 69, 78

if not (PG_BIN / "initdb").exists() or not rabbit.available():
    pytest.skip("needs PostgreSQL 15 and RabbitMQ server binaries", allow_module_level=True)
if shutil.which("openssl") is None:
    pytest.skip("needs the openssl command line", allow_module_level=True)


@pytest.fixture(scope="module")
def workdir() -> Iterator[Path]:
    """A directory the server users can reach (pytest's own tmp is root-only)."""
    path = Path(tempfile.mkdtemp(prefix="ledgerq-tls-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def pki(workdir: Path) -> Pki:
    """A CA, a server certificate it signed for 127.0.0.1 and localhost, and another CA."""
    directory = workdir / "pki"
    directory.mkdir()
    return make_pki(directory)


def server_files(pki: Pki, directory: Path, user: str) -> tuple[Path, Path, Path]:
    """Copies of the CA, the server certificate and its key (0600), owned by ``user``."""
    directory.mkdir(mode=0o700)
    copies = []
    for source in (pki.ca, pki.server_cert, pki.server_key):
        target = directory / source.name
        shutil.copyfile(source, target)
        target.chmod(0o600 if source == pki.server_key else 0o644)
        copies.append(target)
    chown(directory, user)
    return copies[0], copies[1], copies[2]


@pytest.fixture(scope="module")
def tls_postgres(workdir: Path, pki: Pki) -> Iterator[int]:
    """A cluster of its own: ssl=on, TCP only through TLS (hostssl). Yields its port."""
    home = workdir / "pg"
    _, cert, key = server_files(pki, home, "postgres")
    data, hba = home / "data", home / "pg_hba.conf"
    hba.write_text("local all all trust\nhostssl all all 127.0.0.1/32 trust\n")
    chown(home, "postgres")
    port = free_port()
    user = as_user("postgres")
    run(*user, PG_BIN / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync")
    options = (
        f"-p {port} -k {home} -c listen_addresses=127.0.0.1 -c ssl=on -c fsync=off "
        f"-c ssl_cert_file={cert} -c ssl_key_file={key} -c hba_file={hba}"
    )
    try:
        run(*user, PG_BIN / "pg_ctl", "-D", data, "-l", home / "log", "-w", "-o", options, "start")
        yield port
    finally:
        subprocess.run(
            [*user, str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"],
            capture_output=True,
            timeout=60,
            check=False,
        )


@pytest.fixture(scope="module")
def tls_rabbitmq(workdir: Path, pki: Pki) -> Iterator[int]:
    """A second RabbitMQ node with a TLS listener and no plain one. Yields its port."""
    home = workdir / "rabbitmq"
    ca, cert, key = server_files(pki, home, "rabbitmq")
    port = free_port()
    node = RabbitNode(
        home,
        port=port,
        config=(
            f"listeners.tcp = none\nlisteners.ssl.default = 127.0.0.1:{port}\n"
            f"ssl_options.cacertfile = {ca}\nssl_options.certfile = {cert}\n"
            f"ssl_options.keyfile = {key}\nssl_options.verify = verify_none\n"
            "ssl_options.fail_if_no_peer_cert = false\nloopback_users = none\n"
        ),
    )
    try:
        yield node.start().port
    finally:
        node.stop()


def database_url(port: int, root_cert: Path | str, sslmode: str = "verify-full") -> str:
    return (
        f"postgresql+psycopg://postgres:{DB_PASSWORD}@127.0.0.1:{port}/ledgerq"
        f"?sslmode={sslmode}&sslrootcert={root_cert}"
    )


@pytest.fixture(scope="module")
def tls_settings(tls_postgres: int, tls_rabbitmq: int, pki: Pki) -> Settings:
    """Both services over TLS with the test CA; the ledger migrated (over TLS too)."""
    settings = Settings(
        database_url=database_url(tls_postgres, pki.ca),
        amqp_url=f"amqps://guest:guest@127.0.0.1:{tls_rabbitmq}/",
        amqp_prefix="lqtls",
        amqp_ca_file=str(pki.ca),
        connect_wait_s=10,
    )
    upgrade(settings)
    return settings


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert result.stdout == ""
    return lines[0]


def ssl_backends(settings: Settings) -> list[tuple[str, bool]]:
    """``(application_name, ssl)`` of every other client connection ledgerq holds."""
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        rows = conn.execute(
            "SELECT a.application_name, s.ssl FROM pg_stat_activity a JOIN pg_stat_ssl s "
            "USING (pid) WHERE a.backend_type = 'client backend' AND a.pid <> pg_backend_pid()"
        ).fetchall()
    return [(str(name), bool(on)) for name, on in rows]


def test_one_context_for_both_clients_verifies_chain_and_host_name(pki: Pki) -> None:
    settings = Settings(amqp_url="amqps://guest:guest@127.0.0.1:5671/", amqp_ca_file=str(pki.ca))
    context = settings.amqp_ssl_context()
    assert context is not None
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    [only] = context.get_ca_certs()  # the test CA, and not the system's
    assert "'ledgerq ca'" in str(only["subject"])
    # Without the setting: the system's CAs, which do not know the test CA.
    system = replace(settings, amqp_ca_file=None).amqp_ssl_context()
    assert system is not None and system.verify_mode == ssl.CERT_REQUIRED
    plain = replace(settings, amqp_url="amqp://127.0.0.1/", amqp_ca_file=None)
    assert plain.amqp_ssl_context() is None
    # A client certificate is loaded too (the server's stands in for one here).
    with_cert = replace(
        settings, amqp_cert_file=str(pki.server_cert), amqp_key_file=str(pki.server_key)
    )
    assert with_cert.amqp_ssl_context() is not None
    with pytest.raises(ConfigError, match=r"^Settings\.amqp_cert_file / .*KEY_VALUES_MISMATCH"):
        replace(with_cert, amqp_key_file=str(pki.ca.with_suffix(".key")))


def test_bad_tls_settings_stop_a_command_with_one_line(pki: Pki) -> None:
    base = Settings(amqp_url="amqps://guest:guest@127.0.0.1:5671/")
    missing = ledgerq(base, "config", LEDGERQ_AMQP_CA_FILE="/nonexistent/ca.pem")
    assert missing.returncode == EX_CONFIG
    assert one_line(missing).startswith("ledgerq: LEDGERQ_AMQP_CA_FILE (a PEM file) does not exist")
    not_pem = ledgerq(base, "config", LEDGERQ_AMQP_CA_FILE=str(pki.ca.with_suffix(".key")))
    assert not_pem.returncode == EX_CONFIG
    assert "LEDGERQ_AMQP_CA_FILE holds no CA certificate" in one_line(not_pem)
    in_url = ledgerq(base, "config", LEDGERQ_AMQP_URL=f"amqps://u:Pw-in-url@h/?cafile={pki.ca}")
    assert in_url.returncode == EX_CONFIG
    line = one_line(in_url)
    assert "TLS parameter(s) cafile" in line and "LEDGERQ_AMQP_CA_FILE" in line
    assert "Pw-in-url" not in line
    plain = ledgerq(base, "config", LEDGERQ_AMQP_URL="amqp://h/", LEDGERQ_AMQP_CA_FILE=str(pki.ca))
    assert plain.returncode == EX_CONFIG
    assert "is not amqps://" in one_line(plain)


async def test_a_task_goes_through_relay_worker_and_reconciler_over_tls(
    tls_settings: Settings, tls_postgres: int
) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("tls.record")
    async def record(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(payload["n"])

    async with Pipeline(tls_settings, registry) as pipe:
        [first] = enqueue_committed(tls_settings, [TaskSpec("tls.record", {"n": 1})])
        assert await pipe.settle([first]) == {first: "succeeded"}

        # The reconciler publishes with pika, over TLS with the same CA setting; the
        # worker (aio-pika) runs what it published. No relay pass in between.
        [second] = enqueue_committed(tls_settings, [TaskSpec("tls.record", {"n": 2})])
        await asyncio.sleep(0.3)
        async with open_reconciler(tls_settings, ReconcilerConfig(stall_s=0.2)) as reconciler:
            counts = await reconciler.run_once()
        assert counts.overdue_published == 1
        deadline = time.monotonic() + 20
        while await pipe.statuses([second]) != {second: "succeeded"}:
            assert time.monotonic() < deadline, await pipe.statuses([second])
            await asyncio.sleep(0.05)

        # LISTEN/NOTIFY (a raw psycopg connection from libpq_url) over TLS as well.
        wakeup = Wakeup(tls_settings)
        wakeup.start()
        try:
            assert await wakeup.wait(10)
            backends = ssl_backends(tls_settings)
        finally:
            await wakeup.stop()
    assert ran == [1, 2]
    assert {"ledgerq-relay", "ledgerq-worker"} <= {name for name, _ in backends}
    assert all(on for _, on in backends), backends
    # The cluster refuses TCP without TLS, so none of the above could have been plain.
    plain = database_url(tls_postgres, tls_settings.amqp_ca_file or "", "disable")
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(libpq_url(plain))


async def test_broker_certificate_from_an_unknown_ca_is_refused_at_once(
    tls_settings: Settings, pki: Pki
) -> None:
    for refused in (
        replace(tls_settings, amqp_ca_file=None),  # the system's CAs
        replace(tls_settings, amqp_ca_file=str(pki.other_ca)),
    ):
        started = time.monotonic()
        with pytest.raises(ServiceUnavailableError, match="certificate was not accepted") as info:
            async with open_relay(refused):
                pass
        assert "LEDGERQ_AMQP_CA_FILE" in str(info.value)
        assert time.monotonic() - started < refused.connect_wait_s  # not retried

    # The commands (tests.support passes the URLs, not the CA file): aio-pika, pika.
    for command in ("relay", "reconcile"):
        result = ledgerq(tls_settings, command, LEDGERQ_CONNECT_WAIT_S="30")
        assert result.returncode == EX_UNAVAILABLE, result.stderr
        line = one_line(result)
        assert line.startswith("ledgerq: cannot reach RabbitMQ at amqps://***:***@127.0.0.1:")
        assert "certificate verify failed: self-signed certificate in certificate chain" in line
        assert "LEDGERQ_AMQP_CA_FILE" in line and "(tried for" not in line
    with_ca = ledgerq(tls_settings, "reconcile", LEDGERQ_AMQP_CA_FILE=str(pki.ca))
    assert with_ca.returncode == 0, with_ca.stderr


def test_database_certificate_from_another_ca_is_refused_with_one_line(
    tls_settings: Settings, tls_postgres: int, pki: Pki
) -> None:
    wrong = replace(tls_settings, database_url=database_url(tls_postgres, pki.other_ca))
    started = time.monotonic()
    with pytest.raises(ServiceUnavailableError, match="certificate verify failed"):
        connect_waiting(replace(wrong, connect_wait_s=30.0))
    # refused at once, not retried for 30 s (generous for a loaded machine)
    assert time.monotonic() - started < 25
    result = ledgerq(wrong, "stats", LEDGERQ_CONNECT_WAIT_S="30")
    assert result.returncode == EX_UNAVAILABLE
    line = one_line(result)
    assert line.startswith("ledgerq: cannot reach PostgreSQL at postgresql+psycopg://postgres:***@")
    assert "certificate verify failed" in line
    assert f"sslrootcert={pki.other_ca}" in line  # the TLS parameters are shown, not lost
    assert "(tried for" not in line
    assert DB_PASSWORD not in result.stderr + result.stdout
    good = ledgerq(tls_settings, "stats", "--json")
    assert good.returncode == 0, good.stderr
