"""A multi-host database URL (a primary and its standby, ``target_session_attrs``)
reaches libpq as libpq reads it, on every path ledgerq connects through."""

from __future__ import annotations

from psycopg.conninfo import conninfo_to_dict

from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url

#: SQLAlchemy's documented form for several hosts.
MULTI = (
    "postgresql+psycopg://postgres:pw@/ledgerq?host=10.0.0.1:5432&host=10.0.0.2:5433"
    "&target_session_attrs=read-write"
)


def test_sqlalchemy_multi_host_form_becomes_libpq_host_and_port_lists() -> None:
    params = conninfo_to_dict(libpq_url(MULTI))
    assert params["host"] == "10.0.0.1,10.0.0.2"
    assert params["port"] == "5432,5433"
    assert params["target_session_attrs"] == "read-write"
    assert params["dbname"] == "ledgerq"
    assert params["user"] == "postgres" and params["password"] == "pw"


def test_hosts_without_ports_and_a_single_host_port() -> None:
    both = conninfo_to_dict(libpq_url("postgresql+psycopg://u@/db?host=a&host=b:6000"))
    assert (both["host"], both["port"]) == ("a,b", ",6000")  # empty: the default port
    one = conninfo_to_dict(libpq_url("postgresql+psycopg://u@/db?host=a:6000"))
    assert (one["host"], one["port"]) == ("a", "6000")


def test_libpq_forms_and_plain_urls_pass_unchanged() -> None:
    lists = "postgresql+psycopg://u@/db?host=a,b&port=5432,5433&target_session_attrs=read-write"
    params = conninfo_to_dict(libpq_url(lists))
    assert (params["host"], params["port"]) == ("a,b", "5432,5433")
    socket = conninfo_to_dict(libpq_url("postgresql+psycopg://u@/db?host=/run/postgresql"))
    assert socket["host"] == "/run/postgresql" and "port" not in socket
    plain = "postgresql+psycopg://u@127.0.0.1:5432/db"
    assert libpq_url(plain) == "postgresql://u@127.0.0.1:5432/db"


def test_settings_take_a_multi_host_url_as_one_database() -> None:
    settings = Settings(database_url=MULTI)
    assert settings.ledger_shard_count == 1
    assert settings.database_urls == (MULTI,)
    assert "pw" not in str(settings.masked())
