"""Every misconfiguration fails fast with one line and its exit code: real
processes (``python -m ledgerq``) against the real PostgreSQL and RabbitMQ.

The exit codes are BSD ``sysexits``: 64 the command line is wrong, 69 a service
cannot be reached or refuses the credentials, 78 a setting is malformed or
unsupported, or the schema is missing or outdated. No output of a failing
command may show a password (:data:`PASSWORD` is put in every URL here).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from importlib.metadata import version
from urllib.parse import urlsplit

import pika
import pika.exceptions
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.broker.topology import Topology, message_body
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.pg.migrate import head_revision, upgrade
from ledgerq.ledger.routing import routing_key
from tests.support import ledgerq, ledgerq_env, spawn

EX_USAGE, EX_UNAVAILABLE, EX_CONFIG = 64, 69, 78
#: In every URL of these tests; it must never be printed.
PASSWORD = "Zq8-secret-e7"


def one_line(result: subprocess.CompletedProcess[str]) -> str:
    """The single ``ledgerq:`` line a failing command printed (and nothing else)."""
    output = (result.stdout + result.stderr).strip().splitlines()
    assert len(output) == 1, output
    assert output[0].startswith("ledgerq: "), output
    assert PASSWORD not in result.stdout + result.stderr
    return output[0]


def timed(settings: Settings, *args: str, **env: str) -> tuple[float, str, int]:
    started = time.monotonic()
    result = ledgerq(settings, *args, **env)
    return time.monotonic() - started, one_line(result), result.returncode


#: "At once" against "after retries": a command's start-up alone took 28 to 42 s on a
#: loaded 2-core machine, so no time bound tells the two apart. The tests tell them
#: by what the command says: its one line, its exit code, "(tried for N s)" naming
#: the wait it was given, or no such words when it was not retried. A command that
#: retried forever, as these once did, ends at tests.support.ledgerq's 60 s timeout.


def _maintenance(settings: Settings) -> str:
    return libpq_url(
        make_url(settings.database_url).set(database="postgres").render_as_string(False)
    )


@pytest.fixture
def empty_database(settings: Settings) -> Iterator[Settings]:
    """A database that exists and was never migrated (dropped afterwards)."""
    name = f"ledgerq_misconf_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(_maintenance(settings), autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = make_url(settings.database_url).set(database=name).render_as_string(False)
    yield replace(settings, database_url=url)
    with psycopg.connect(_maintenance(settings), autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


# -- malformed and unsupported URLs --------------------------------------------------------


@pytest.mark.parametrize("command", [["stats"], ["migrate"], ["relay"], ["config"]])
def test_a_malformed_database_url_fails_at_once_naming_the_setting(
    settings: Settings, command: list[str]
) -> None:
    _, line, code = timed(
        settings, *command, LEDGERQ_DATABASE_URL=f"postgres:{PASSWORD}@nowhere:5432:x"
    )
    assert code == EX_CONFIG
    assert line.startswith("ledgerq: LEDGERQ_DATABASE_URL (the ledger) is not")
    assert "expected a URL such as postgresql+psycopg://" in line


def test_the_flag_is_named_when_the_bad_value_came_from_the_flag(settings: Settings) -> None:
    result = ledgerq(settings, "--database-url", "notaurl", "stats")
    assert result.returncode == EX_CONFIG
    assert one_line(result) == (
        "ledgerq: --database-url (the ledger) is not a database URL: 'notaurl' "
        "(expected a URL such as postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq)"
    )


@pytest.mark.parametrize("command", [["relay"], ["worker", "--app", "tests.apps.slow_app"]])
def test_a_malformed_amqp_url_fails_at_once_instead_of_retrying_forever(
    settings: Settings, command: list[str]
) -> None:
    # Before: both retried every 5 s until killed, logging the raw URL each time.
    _, line, code = timed(settings, *command, LEDGERQ_AMQP_URL="notaurl")
    assert code == EX_CONFIG
    assert line.startswith("ledgerq: LEDGERQ_AMQP_URL (RabbitMQ) is not an AMQP URL: 'notaurl'")


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        (f"postgresql+asyncpg://postgres:{PASSWORD}@127.0.0.1/x", "postgresql+asyncpg"),
        (f"mysql://root:{PASSWORD}@127.0.0.1/x", "mysql"),
        ("sqlite:///tmp/app.db", "sqlite"),
    ],
)
@pytest.mark.parametrize("command", ["stats", "migrate"])
def test_an_unsupported_driver_is_refused_with_the_supported_ones(
    settings: Settings, url: str, driver: str, command: str
) -> None:
    # Before: asyncpg printed a ModuleNotFoundError traceback; mysql:// was silently
    # rewritten and connected to PostgreSQL.
    result = ledgerq(settings, command, LEDGERQ_DATABASE_URL=url)
    assert result.returncode == EX_CONFIG
    line = one_line(result)
    assert f"uses the driver {driver!r}, which ledgerq does not support" in line
    assert line.endswith(
        "(supported: postgresql+psycopg://, postgresql://, mysql+pymysql://, mariadb+pymysql://)"
    )


def test_bad_values_of_several_settings_get_one_line_each(settings: Settings) -> None:
    result = ledgerq(
        settings,
        "--amqp-prefix",
        "amq.reserved",
        "stats",
        LEDGERQ_EVENT_LOOP="tokio",
        LEDGERQ_STATEMENT_TIMEOUT_MS="soon",
        LEDGERQ_AMQP_URL=f"http://guest:{PASSWORD}@127.0.0.1/",
    )
    assert result.returncode == EX_CONFIG
    lines = result.stderr.strip().splitlines()
    assert [line.split()[1] for line in lines] == [
        "LEDGERQ_AMQP_URL",
        "--amqp-prefix",
        "LEDGERQ_EVENT_LOOP",
        "LEDGERQ_STATEMENT_TIMEOUT_MS",
    ]
    assert "LEDGERQ_EVENT_LOOP must be uvloop or asyncio, got 'tokio'" in lines[2]
    assert PASSWORD not in result.stdout + result.stderr


# -- unreachable services and refused credentials ------------------------------------------


def test_unreachable_postgresql_is_retried_for_the_connect_wait_then_69(
    settings: Settings,
) -> None:
    url = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/ledgerq"
    elapsed, line, code = timed(
        settings, "stats", LEDGERQ_DATABASE_URL=url, LEDGERQ_CONNECT_WAIT_S="2"
    )
    assert code == EX_UNAVAILABLE
    assert line.startswith("ledgerq: cannot reach PostgreSQL at postgresql+psycopg://postgres:***@")
    assert "(tried for 2 s)" in line and "LEDGERQ_DATABASE_URL" in line
    assert elapsed >= 2  # the line names the 2 s given, not the default 10 s


@pytest.mark.parametrize("command", [["relay"], ["reconcile"]])
def test_unreachable_rabbitmq_is_retried_for_the_connect_wait_then_69(
    settings: Settings, command: list[str]
) -> None:
    url = f"amqp://guest:{PASSWORD}@127.0.0.1:1/"
    elapsed, line, code = timed(
        settings, *command, LEDGERQ_AMQP_URL=url, LEDGERQ_CONNECT_WAIT_S="2"
    )
    assert code == EX_UNAVAILABLE
    assert line.startswith("ledgerq: cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:1/")
    assert "(tried for 2 s)" in line and "LEDGERQ_AMQP_URL" in line
    assert elapsed >= 2  # the line names the 2 s given, not the default 10 s


@pytest.mark.parametrize(
    "command", [["relay"], ["worker", "--app", "tests.apps.slow_app"], ["reconcile"]]
)
def test_wrong_rabbitmq_credentials_fail_at_once_without_retrying(
    settings: Settings, command: list[str]
) -> None:
    broker = urlsplit(settings.amqp_url)  # the real broker, with a wrong password
    wrong = (
        f"amqp://{broker.username or 'guest'}:{PASSWORD}@{broker.hostname}:{broker.port or 5672}/"
    )
    # A long wait: a retry would end "(tried for 30 s)", and take them.
    _, line, code = timed(settings, *command, LEDGERQ_AMQP_URL=wrong, LEDGERQ_CONNECT_WAIT_S="30")
    assert code == EX_UNAVAILABLE
    assert "refused the credentials: " in line and "ACCESS_REFUSED" in line
    assert "fix the user or password in LEDGERQ_AMQP_URL" in line
    assert "(tried for" not in line  # before: ~12 s of retries; a retry says how long


def test_an_unknown_postgresql_role_is_refused_at_once(settings: Settings) -> None:
    url = make_url(settings.database_url).set(username="no_such_role_e", password=PASSWORD)
    _, line, code = timed(
        settings,
        "stats",
        LEDGERQ_DATABASE_URL=url.render_as_string(False),
        LEDGERQ_CONNECT_WAIT_S="30",
    )
    assert code == EX_UNAVAILABLE
    assert 'refused the credentials: role "no_such_role_e" does not exist' in line
    assert "(tried for" not in line  # not retried for the 30 s


# -- the schema ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        ["stats"],
        ["show", "1"],
        ["relay"],
        ["worker", "--app", "tests.apps.slow_app"],
        ["reconcile"],
    ],
)
def test_every_command_that_needs_the_ledger_refuses_an_unmigrated_one(
    empty_database: Settings, command: list[str]
) -> None:
    # Before: tracebacks (stats, show, reconcile), ~1,000 traceback lines in 10 s
    # (relay), or a worker that started as if all were well.
    result = ledgerq(empty_database, *command)
    assert result.returncode == EX_CONFIG
    line = one_line(result)
    assert line.startswith("ledgerq: the ledger schema is missing in postgresql+psycopg://")
    assert line.endswith("(never migrated): run `ledgerq migrate`")


def test_a_database_that_does_not_exist_says_migrate_creates_it(settings: Settings) -> None:
    url = make_url(settings.database_url).set(database=f"nowhere_{uuid.uuid4().hex[:6]}")
    result = ledgerq(settings, "stats", LEDGERQ_DATABASE_URL=url.render_as_string(False))
    assert result.returncode == EX_CONFIG
    assert "does not exist at" in one_line(result)
    assert "run `ledgerq migrate` (it creates the database)" in result.stderr


def test_an_outdated_schema_names_both_revisions(empty_database: Settings) -> None:
    assert ledgerq(empty_database, "migrate", "--revision", "0001").returncode == 0
    assert head_revision() != "0001"
    result = ledgerq(empty_database, "stats")
    assert result.returncode == EX_CONFIG
    assert one_line(result).endswith(
        f"is at revision 0001, this ledgerq needs {head_revision()}: run `ledgerq migrate`"
    )
    assert ledgerq(empty_database, "migrate").returncode == 0
    assert ledgerq(empty_database, "stats").returncode == 0


def test_a_schema_newer_than_this_ledgerq_says_upgrade_ledgerq(empty_database: Settings) -> None:
    upgrade(empty_database)
    with psycopg.connect(libpq_url(empty_database.database_url), autocommit=True) as conn:
        conn.execute("UPDATE ledgerq_alembic_version SET version_num = '9999_future'")
    result = ledgerq(empty_database, "relay")
    assert result.returncode == EX_CONFIG
    assert "at revision 9999_future, which this ledgerq does not know" in one_line(result)
    assert "upgrade ledgerq" in result.stderr


def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_a_running_relay_and_worker_stop_when_the_schema_is_dropped(
    empty_database: Settings,
) -> None:
    upgrade(empty_database)
    topology = Topology(empty_database.amqp_prefix)
    relay = spawn(empty_database, "relay")
    worker = spawn(empty_database, "worker", "--app", "tests.apps.slow_app")
    try:
        with psycopg.connect(libpq_url(empty_database.database_url), autocommit=True) as conn:

            def relay_polling() -> bool:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                    ("ledgerq-relay",),
                ).fetchone()
                return bool(row and row[0])

            _wait_until(relay_polling, 30, "the relay's first poll")
            # The worker registers its route (its kinds) once its queue is declared;
            # its broker queue is "<prefix>.q.default@<route>".
            routes: list[str | None] = []

            def worker_subscribed() -> bool:
                routes[:] = [
                    r[0]
                    for r in conn.execute(
                        "SELECT route FROM ledgerq_subscriptions "
                        "WHERE queue = 'default' AND expires_at > now()"
                    )
                ]
                return bool(routes)

            _wait_until(worker_subscribed, 30, "the worker's subscription")
            key = routing_key("default", routes[0])
            queue = topology.task_queue(key).name
            broker = pika.BlockingConnection(pika.URLParameters(empty_database.amqp_url))

            def worker_consuming() -> bool:
                channel = broker.channel()  # a passive declare of a missing queue closes it
                try:
                    declared = channel.queue_declare(queue, passive=True)
                except pika.exceptions.ChannelClosedByBroker:
                    return False
                channel.close()
                return (declared.method.consumer_count or 0) > 0

            _wait_until(worker_consuming, 30, "the worker's consumer")
            channel = broker.channel()
            conn.execute("DROP TABLE ledgerq_tasks, ledgerq_history CASCADE")
            # The worker meets the loss on its next claim.
            channel.basic_publish(
                topology.exchange.name,
                key,
                message_body(1, 0),
                pika.BasicProperties(message_id="1"),
            )
            broker.close()
        outputs = {}
        for name, proc in (("relay", relay), ("worker", worker)):
            outputs[name], _ = proc.communicate(timeout=30)
    finally:
        for proc in (relay, worker):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, proc in (("relay", relay), ("worker", worker)):
        output = outputs[name]
        assert proc.returncode == EX_CONFIG, output
        last = output.strip().splitlines()[-1]
        # Met by a running statement, or (the relay's first connection counts as
        # "polling" above) by the start-up check the drop overtook: one line each.
        met_running = last.startswith('ledgerq: relation "ledgerq_') and last.endswith(
            "the ledger schema is missing or outdated; run `ledgerq migrate`"
        )
        met_at_start = last.startswith("ledgerq: the ledger schema in ") and last.endswith(
            "are gone: drop the table ledgerq_alembic_version, then run `ledgerq migrate`"
        )
        assert met_running or met_at_start, output
        assert "Traceback" not in output
        assert len(output.strip().splitlines()) <= 5, output  # no loop of retries


# -- secrets -------------------------------------------------------------------------------


def test_no_password_appears_in_verbose_logs_of_a_failing_service(settings: Settings) -> None:
    # -vv: debug logging of aio-pika, aiormq and ledgerq, reconnect attempts included.
    url = f"amqp://guest:{PASSWORD}@127.0.0.1:1/"
    result = ledgerq(settings, "-vv", "relay", LEDGERQ_AMQP_URL=url, LEDGERQ_CONNECT_WAIT_S="1.5")
    assert result.returncode == EX_UNAVAILABLE
    assert "Connection refused" in result.stderr
    assert PASSWORD not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:1/x",  # unreachable
        f"postgresql+psycopg://postgres@127.0.0.1:1/x?password={PASSWORD}",
        f"postgresql+psycopg://postgres:pa/{PASSWORD}@127.0.0.1:1/x",  # malformed
        f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:5432:x/",  # malformed port
    ],
)
def test_no_password_appears_in_any_failing_database_command(settings: Settings, url: str) -> None:
    for command in (["stats"], ["migrate"], ["-vv", "reconcile"]):
        result = ledgerq(settings, *command, LEDGERQ_DATABASE_URL=url, LEDGERQ_CONNECT_WAIT_S="0")
        assert result.returncode in (EX_CONFIG, EX_UNAVAILABLE), result.stderr
        assert PASSWORD not in result.stdout + result.stderr, (command, result.stderr)
        assert "Traceback" not in result.stderr


def test_config_prints_the_effective_settings_with_secrets_masked(settings: Settings) -> None:
    database_url = f"postgresql+psycopg://postgres:{PASSWORD}@db.example:5432/app?sslmode=require"
    result = subprocess.run(
        [sys.executable, "-m", "ledgerq", "--amqp-prefix", "from-flag", "config", "--json"],
        env=ledgerq_env(
            settings,
            LEDGERQ_DATABASE_URL=database_url,
            LEDGERQ_AMQP_URL=f"amqps://app:{PASSWORD}@mq.example/vhost?token={PASSWORD}",
            LEDGERQ_EVENT_LOOP="asyncio",
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout + result.stderr
    shown = json.loads(result.stdout)
    assert shown["database_url"] == {
        "value": "postgresql+psycopg://postgres:***@db.example:5432/app?sslmode=require",
        "source": "LEDGERQ_DATABASE_URL",
        "env": "LEDGERQ_DATABASE_URL",
        "flag": "--database-url",
    }
    assert shown["amqp_url"]["value"] == "amqps://app:***@mq.example/vhost?token=***"
    assert shown["amqp_prefix"]["value"] == "from-flag"
    assert shown["amqp_prefix"]["source"] == "--amqp-prefix"
    assert shown["event_loop"]["value"] == "asyncio"
    assert shown["connect_wait_s"]["value"] == 1.0  # tests.support sets LEDGERQ_CONNECT_WAIT_S=1

    human = ledgerq(settings, "config", LEDGERQ_DATABASE_URL=database_url)
    assert human.returncode == 0
    assert "LEDGERQ_DATABASE_URL=postgresql+psycopg://postgres:***@db.example" in human.stdout
    assert PASSWORD not in human.stdout


# -- the command line ----------------------------------------------------------------------


def test_usage_errors_exit_64(settings: Settings) -> None:
    for args in (
        ["no-such-command"],
        ["stats", "--no-such-option"],
        ["show", "not-an-id"],
        ["migrate", "--revision", "no-such-revision"],
    ):
        result = ledgerq(settings, *args)
        assert result.returncode == EX_USAGE, (args, result.stderr)
        assert "Traceback" not in result.stderr
    assert "no ledgerq migration is called 'no-such-revision'" in result.stderr


def test_version_comes_from_the_package_metadata(settings: Settings) -> None:
    result = ledgerq(settings, "--version")
    assert result.returncode == 0
    assert result.stdout.strip() == f"ledgerq, version {version('ledgerq')}"


def test_bench_plot_without_matplotlib_is_one_line_before_any_work(settings: Settings) -> None:
    # The bench extra is installed here: hide matplotlib from this one process.
    script = (
        "import sys\n"
        "sys.modules['matplotlib'] = None\n"
        "sys.argv = ['ledgerq', 'bench', '--plot', 'latency.png']\n"
        "from ledgerq.cli import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=ledgerq_env(settings, LEDGERQ_DATABASE_URL="postgresql+psycopg://nobody@127.0.0.1:1/x"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == EX_CONFIG
    assert one_line(result) == (
        "ledgerq: bench --plot needs matplotlib, which is not installed: "
        "pip install 'ledgerq[bench]' (or run bench without --plot)"
    )
