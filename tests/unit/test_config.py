"""Settings: one table, every setting from its environment variable or its flag,
validated at start with one line per bad value."""

from __future__ import annotations

import re
from dataclasses import fields, replace
from pathlib import Path

import pytest

from ledgerq.core.config import ConfigError, Settings
from ledgerq.core.errors import LedgerqError
from ledgerq.core.settings_table import SETTINGS

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_come_from_nowhere_and_say_so() -> None:
    settings = Settings.from_env({})
    assert settings == Settings()
    assert set(settings.sources.values()) == {"default"}
    assert settings.event_loop == "uvloop" and settings.connect_wait_s == 10.0


def test_every_setting_is_read_from_its_variable_and_a_flag_wins() -> None:
    env = {
        "LEDGERQ_DATABASE_URL": "postgresql+psycopg://app@db:5432/ledger",
        "LEDGERQ_AMQP_URL": "amqps://app@mq:5671/v",
        "LEDGERQ_AMQP_PREFIX": "shop",
        "LEDGERQ_CONNECT_WAIT_S": "2.5",
        "LEDGERQ_EVENT_LOOP": "asyncio",
        "LEDGERQ_STATEMENT_TIMEOUT_MS": "5000",
        "LEDGERQ_IDLE_IN_TRANSACTION_TIMEOUT_MS": "0",
    }
    settings = Settings.from_env(env, amqp_prefix="from-flag", connect_wait_s="7")
    assert settings.database_url == env["LEDGERQ_DATABASE_URL"]
    assert settings.amqp_url == env["LEDGERQ_AMQP_URL"]
    assert (settings.amqp_prefix, settings.connect_wait_s) == ("from-flag", 7.0)
    assert settings.event_loop == "asyncio"
    assert (settings.statement_timeout_ms, settings.idle_in_transaction_timeout_ms) == (5000, 0)
    assert settings.sources["amqp_prefix"] == "--amqp-prefix"
    assert settings.sources["event_loop"] == "LEDGERQ_EVENT_LOOP"


def test_the_table_covers_every_field_and_the_docs_list_every_variable() -> None:
    assert {s.field for s in SETTINGS} == {f.name for f in fields(Settings)} - {"sources"}
    reference = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    for setting in SETTINGS:
        assert f"`{setting.env}`" in reference, setting.env
        if setting.flag:
            assert f"`{setting.flag}" in reference, setting.flag


def test_plain_postgresql_means_psycopg_3() -> None:
    settings = Settings.from_env({"LEDGERQ_DATABASE_URL": "postgresql://app@db/x"})
    assert settings.database_url == "postgresql+psycopg://app@db/x"


@pytest.mark.parametrize(
    ("env", "line"),
    [
        (
            {"LEDGERQ_DATABASE_URL": "notaurl"},
            "LEDGERQ_DATABASE_URL (the ledger) is not a database URL: 'notaurl' "
            "(expected a URL such as postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq)",
        ),
        (
            {"LEDGERQ_DATABASE_URL": "mysql://root:pw-hidden@db/x"},
            "LEDGERQ_DATABASE_URL (the ledger) uses the driver 'mysql', which ledgerq "
            "does not support: 'mysql://root:***@db/x' (supported: postgresql+psycopg://, "
            "postgresql://, mysql+pymysql://, mariadb+pymysql://)",
        ),
        (
            {"LEDGERQ_AMQP_URL": "amqp://guest@:5672/"},
            "LEDGERQ_AMQP_URL (RabbitMQ) is not an AMQP URL: 'amqp://guest@:5672/' "
            "(expected a URL such as amqp://guest@127.0.0.1:5672/ or amqps://...)",
        ),
        (
            {"LEDGERQ_AMQP_URL": "amqp://guest@mq:port/"},
            "LEDGERQ_AMQP_URL (RabbitMQ) is not an AMQP URL: 'amqp://guest@mq:port/' "
            "(expected a URL such as amqp://guest@127.0.0.1:5672/ or amqps://...)",
        ),
        (
            {"LEDGERQ_AMQP_PREFIX": "has space"},
            "LEDGERQ_AMQP_PREFIX (RabbitMQ names) must be 1-100 letters, digits, '.', '_' or "
            "'-', starting with a letter or digit and not with 'amq.', got 'has space'",
        ),
        (
            {"LEDGERQ_CONNECT_WAIT_S": "-1"},
            "LEDGERQ_CONNECT_WAIT_S must be a number of seconds from 0 to 3600, got '-1'",
        ),
        (
            {"LEDGERQ_CONNECT_WAIT_S": "nan"},
            "LEDGERQ_CONNECT_WAIT_S must be a number of seconds from 0 to 3600, got 'nan'",
        ),
        (
            {"LEDGERQ_EVENT_LOOP": "trio"},
            "LEDGERQ_EVENT_LOOP must be uvloop or asyncio, got 'trio'",
        ),
        (
            {"LEDGERQ_STATEMENT_TIMEOUT_MS": "1e12"},
            "LEDGERQ_STATEMENT_TIMEOUT_MS must be a number of milliseconds from 0 to 86400000, "
            "got '1e12'",
        ),
    ],
)
def test_each_bad_value_is_one_line_naming_its_variable(env: dict[str, str], line: str) -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(env)
    assert str(refused.value) == line
    assert isinstance(refused.value, LedgerqError) and isinstance(refused.value, ValueError)


def test_a_bad_flag_is_named_as_the_flag_and_every_bad_value_gets_its_line() -> None:
    with pytest.raises(ConfigError) as refused:
        Settings.from_env(
            {"LEDGERQ_EVENT_LOOP": "trio", "LEDGERQ_AMQP_URL": "x"},
            database_url="postgresql+asyncpg://a@b/c",
        )
    lines = str(refused.value).splitlines()
    assert [re.split(r" ", line, maxsplit=1)[0] for line in lines] == [
        "--database-url",
        "LEDGERQ_AMQP_URL",
        "LEDGERQ_EVENT_LOOP",
    ]


def test_settings_built_in_code_are_checked_too_naming_the_field() -> None:
    with pytest.raises(ConfigError, match=r"^Settings\.event_loop must be uvloop or asyncio"):
        Settings(event_loop="tokio")
    with pytest.raises(ConfigError, match=r"^Settings\.amqp_prefix "):
        replace(Settings(), amqp_prefix="amq.reserved")
    with pytest.raises(TypeError):
        Settings.from_env({}, no_such_setting="1")


def test_the_amqp_url_may_list_the_nodes_of_a_cluster() -> None:
    listed = "amqp://g:g@mq-0:5672/, amqp://g:g@mq-1:5672/"
    settings = Settings.from_env({"LEDGERQ_AMQP_URL": listed})
    assert settings.amqp_urls == ("amqp://g:g@mq-0:5672/", "amqp://g:g@mq-1:5672/")
    with pytest.raises(ConfigError, match="is not an AMQP URL: 'http://mq-1/'"):
        Settings.from_env({"LEDGERQ_AMQP_URL": "amqp://g:g@mq-0/,http://mq-1/"})
