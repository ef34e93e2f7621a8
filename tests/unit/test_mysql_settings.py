"""The MySQL / MariaDB ledger's settings and server check, without a server: which
URLs pick it, the async URL derived from the sync one, the one database it takes,
and the refusal of a server too old (a typed error, exit 78)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ledgerq.cli.group import EX_CONFIG, exit_code
from ledgerq.core.config import ConfigError, Settings
from ledgerq.core.errors import NotBuiltOnMySQLError, UnsupportedServerError
from ledgerq.ledger.mysql.engines import Server, async_url, init_command

URL = "mariadb+pymysql://app:s3cret@db:3306/shop"


@pytest.mark.parametrize(
    ("url", "mysql"),
    [
        (URL, True),
        ("mysql+pymysql://root@127.0.0.1/x", True),
        ("postgresql+psycopg://postgres@127.0.0.1/x", False),
        ("postgresql://postgres@127.0.0.1/x", False),
    ],
)
def test_the_url_picks_the_implementation(url: str, mysql: bool) -> None:
    assert Settings(database_url=url).on_mysql is mysql


def test_the_async_url_swaps_the_driver_and_keeps_the_rest() -> None:
    assert async_url(URL) == "mariadb+aiomysql://app:s3cret@db:3306/shop"
    assert async_url("mysql+pymysql://root@h/x?charset=utf8mb4") == (
        "mysql+aiomysql://root@h/x?charset=utf8mb4"
    )


def test_a_mysql_ledger_splits_across_mysql_databases_only_and_takes_no_pooler() -> None:
    split = Settings(database_url=f"{URL},mariadb+pymysql://app@db2/shop")
    assert split.on_mysql and split.ledger_shard_count == 2
    assert split.ledger_shard(1).database_url == "mariadb+pymysql://app@db2/shop"
    for mixed in (f"{URL},postgresql://app@db2/shop", f"postgresql://app@db2/shop,{URL}"):
        with pytest.raises(ConfigError, match="lists MySQL / MariaDB and PostgreSQL databases"):
            Settings(database_url=mixed)
    with pytest.raises(ConfigError, match="takes no LEDGERQ_DATABASE_POOLER"):
        Settings(database_url=URL, database_pooler="transaction")


@pytest.mark.parametrize(
    ("version", "ok"),
    [
        ("10.11.19-MariaDB-0+deb12u1", True),
        ("10.6.4-MariaDB", True),
        ("10.5.23-MariaDB-0+deb11u1", False),
        ("8.0.36", True),
        ("8.4.0-commercial", True),
        ("5.7.44-log", False),
    ],
)
def test_an_older_server_is_refused_in_one_line(version: str, ok: bool) -> None:
    server = Server.parse(version)
    if ok:
        server.check(URL)
        return
    with pytest.raises(UnsupportedServerError) as refused:
        server.check(URL)
    message = str(refused.value)
    assert "\n" not in message and version in message and "s3cret" not in message
    assert ("MariaDB 10.6" in message) if "MariaDB" in version else ("MySQL 8.0" in message)
    assert exit_code(refused.value) == EX_CONFIG


def test_what_is_not_built_on_mysql_exits_78() -> None:
    assert exit_code(NotBuiltOnMySQLError("relay: not built")) == EX_CONFIG


def test_every_connection_is_set_to_utc_and_strict_with_mariadbs_guards_in_a_comment() -> None:
    command = init_command(Settings(database_url=URL, statement_timeout_ms=30_000))
    assert command.startswith("SET time_zone = '+00:00', sql_mode = 'STRICT_TRANS_TABLES")
    assert "/*M!100300 , max_statement_time = 30, idle_transaction_timeout = 120 */" in command


def test_a_postgresql_process_never_loads_the_mysql_drivers() -> None:
    """The composition root imports the MySQL ledger only for a MySQL URL: the
    CLI, the worker's, the relay's and the reconciler's composition load no
    MySQL module (docs/performance.md, the seventh session's merges)."""
    code = (
        "import sys\n"
        "import ledgerq, ledgerq.cli, ledgerq.compose.storage, ledgerq.compose.worker\n"
        "import ledgerq.compose.relay, ledgerq.compose.reconciler\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pymysql', 'aiomysql')"
        " or m.startswith('ledgerq.ledger.mysql')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_direct_worker_polls_every_tenth_of_a_second_on_mysql_and_every_second_on_pg() -> None:
    # MySQL has no LISTEN: the poll is the only wake-up, and sets the idle latency
    from ledgerq.consumers.direct import DirectConfig

    assert DirectConfig.default_poll_s(mysql=True) == 0.1
    assert DirectConfig.default_poll_s(mysql=False) == DirectConfig().poll_s == 1.0
