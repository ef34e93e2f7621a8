"""The settings table: each setting's field, environment variable, CLI option,
help line, how its value is parsed and checked (:data:`PARSERS`), and how it is
shown with its secrets masked (:func:`shown`).

:class:`~ledgerq.core.config.Settings` is built from this table, and so are
``ledgerq config`` and the CLI's global options: a setting added here is read,
checked, listed and masked everywhere, and ``Settings`` asserts at import that
its fields, this table and the parsers name the same settings.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ledgerq.core.limits import MAX_SHARDS
from ledgerq.core.masking import MASK, mask_url
from ledgerq.core.tls import parse_tls_file
from ledgerq.core.values import (
    choice,
    number,
    optional_text,
    parse_address,
    parse_addresses,
    parse_amqp_url,
    parse_callable_path,
    parse_database_urls,
    parse_event_loop,
    parse_port,
    parse_prefix,
)

DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_AMQP_PREFIX = "ledgerq"


@dataclass(frozen=True)
class Setting:
    """One row of the settings table: where a value comes from and what it means."""

    field: str
    env: str
    flag: str | None
    help: str
    #: A URL that may carry credentials (shown through mask_url).
    secret: bool = False
    #: A secret as a whole (never shown, and masked in every log line).
    password: bool = False


SETTINGS = (
    Setting(
        "database_url",
        "LEDGERQ_DATABASE_URL",
        "--database-url",
        "SQLAlchemy URL of the ledger (postgresql+psycopg://, or mysql+pymysql:// and "
        "mariadb+pymysql:// for MySQL 8.0+ / MariaDB 10.6+); several URLs "
        "separated by commas split the ledger across those databases (ledger shards, in "
        "order: never reorder them)",
        secret=True,
    ),
    Setting(
        "database_pooler",
        "LEDGERQ_DATABASE_POOLER",
        None,
        "what LEDGERQ_DATABASE_URL reaches: none (PostgreSQL itself, or a session pool) or "
        "transaction (a transaction-pooling proxy such as PgBouncer)",
    ),
    Setting(
        "direct_database_url",
        "LEDGERQ_DIRECT_DATABASE_URL",
        None,
        "a session connection to the same database, for LISTEN, the reconciler's lock and "
        "migrations, when LEDGERQ_DATABASE_URL is a transaction pooler (with ledger shards: "
        "one URL per shard, in the same order)",
        secret=True,
    ),
    Setting(
        "amqp_url",
        "LEDGERQ_AMQP_URL",
        "--amqp-url",
        "RabbitMQ URL (amqp:// or amqps://); a cluster's nodes as URLs separated by commas",
        secret=True,
    ),
    Setting(
        "amqp_prefix",
        "LEDGERQ_AMQP_PREFIX",
        "--amqp-prefix",
        "prefix of every exchange and queue name ledgerq declares",
    ),
    Setting(
        "queue_type",
        "LEDGERQ_QUEUE_TYPE",
        "--queue-type",
        "RabbitMQ queue type: classic (one node, priorities) or quorum (replicated)",
    ),
    Setting(
        "connect_wait_s",
        "LEDGERQ_CONNECT_WAIT_S",
        "--connect-wait",
        "seconds a command keeps trying to reach PostgreSQL and RabbitMQ at start",
    ),
    Setting(
        "event_loop",
        "LEDGERQ_EVENT_LOOP",
        "--event-loop",
        "event loop of relay, worker and reconcile",
    ),
    Setting(
        "statement_timeout_ms",
        "LEDGERQ_STATEMENT_TIMEOUT_MS",
        None,
        "statement_timeout of ledgerq's own connections (ms, 0: none)",
    ),
    Setting(
        "idle_in_transaction_timeout_ms",
        "LEDGERQ_IDLE_IN_TRANSACTION_TIMEOUT_MS",
        None,
        "idle_in_transaction_session_timeout of ledgerq's own connections (ms, 0: none)",
    ),
    Setting(
        "amqp_ca_file",
        "LEDGERQ_AMQP_CA_FILE",
        None,
        "PEM file of the CAs RabbitMQ's TLS certificate must chain to (amqps://; "
        "default: the system's CAs)",
    ),
    Setting(
        "amqp_cert_file",
        "LEDGERQ_AMQP_CERT_FILE",
        None,
        "PEM client certificate ledgerq presents to RabbitMQ over TLS (optional)",
    ),
    Setting(
        "amqp_key_file",
        "LEDGERQ_AMQP_KEY_FILE",
        None,
        "PEM private key (unencrypted) of LEDGERQ_AMQP_CERT_FILE, if not in that file",
    ),
    *(
        Setting(
            f"retention_{status}_days",
            f"LEDGERQ_RETENTION_{status.upper()}_DAYS",
            None,
            f"days a {status} task is kept in history before the reconciler purges it (0: forever)",
        )
        for status in ("succeeded", "dead", "cancelled")
    ),
    Setting(
        "shards",
        "LEDGERQ_SHARDS",
        None,
        "shard count: a task's shard is its shard_key's hash (or its id) modulo this "
        "(docs/howto.md#serve-some-kinds-or-shards)",
    ),
    Setting(
        "priority_aging_s",
        "LEDGERQ_PRIORITY_AGING_S",
        None,
        "seconds a due task waits before the relay publishes it ahead of every priority (0: never)",
    ),
    Setting(
        "periodic_catch_up",
        "LEDGERQ_PERIODIC_CATCH_UP",
        None,
        "after an outage, periodic tasks enqueue the latest missed period (latest) or none",
    ),
    Setting("log_format", "LEDGERQ_LOG_FORMAT", "--log-format", "log lines as text or json"),
    Setting(
        "metrics_port",
        "LEDGERQ_METRICS_PORT",
        None,
        "port of relay's and worker's /metrics, /healthz, /readyz (0: none; --metrics-port)",
    ),
    # Dead-task alerts (docs/reference.md#dead-task-alerts), besides the log line.
    Setting(
        "alert_webhook",
        "LEDGERQ_ALERT_WEBHOOK",
        None,
        "http(s) URL each dead task is POSTed to as JSON",
        secret=True,
    ),
    Setting(
        "alert_callable", "LEDGERQ_ALERT_CALLABLE", None, "pkg.module:function called per dead task"
    ),
    Setting("smtp_host", "LEDGERQ_SMTP_HOST", None, "SMTP server for dead-task emails"),
    Setting("smtp_port", "LEDGERQ_SMTP_PORT", None, "its port (0: 465 for ssl, 587, 25 for none)"),
    Setting("smtp_tls", "LEDGERQ_SMTP_TLS", None, "starttls, ssl (SMTPS) or none"),
    Setting("smtp_ca_file", "LEDGERQ_SMTP_CA_FILE", None, "PEM CAs the SMTP server must chain to"),
    Setting("smtp_user", "LEDGERQ_SMTP_USER", None, "SMTP login (needs TLS)"),
    Setting("smtp_password", "LEDGERQ_SMTP_PASSWORD", None, "its password", password=True),
    Setting("alert_email_from", "LEDGERQ_ALERT_EMAIL_FROM", None, "sender of alert emails"),
    Setting("alert_email_to", "LEDGERQ_ALERT_EMAIL_TO", None, "comma-separated recipients"),
)
BY_FIELD = {s.field: s for s in SETTINGS}


#: Each setting's parser: the value normalised, or a ValueError saying what is expected.
PARSERS: dict[str, Callable[[Any], Any]] = {
    "database_url": parse_database_urls,
    "database_pooler": choice("none", "transaction"),
    "direct_database_url": lambda v: parse_database_urls(v) if v else None,
    "amqp_url": parse_amqp_url,
    "amqp_prefix": parse_prefix,
    "queue_type": choice("classic", "quorum"),
    "connect_wait_s": number(0, 3600, "seconds", float),
    "event_loop": parse_event_loop,
    "statement_timeout_ms": number(0, 86_400_000, "milliseconds", int),
    "idle_in_transaction_timeout_ms": number(0, 86_400_000, "milliseconds", int),
    "amqp_ca_file": parse_tls_file,
    "amqp_cert_file": parse_tls_file,
    "amqp_key_file": parse_tls_file,
    "retention_succeeded_days": number(0, 36_500, "days", float),
    "retention_dead_days": number(0, 36_500, "days", float),
    "retention_cancelled_days": number(0, 36_500, "days", float),
    "priority_aging_s": number(0, 31_536_000, "seconds", float),
    "shards": number(1, MAX_SHARDS, "shards", int),
    "periodic_catch_up": choice("latest", "none"),
    "log_format": choice("text", "json"),
    "metrics_port": parse_port,
    "alert_webhook": optional_text,
    "alert_callable": parse_callable_path,
    "smtp_host": optional_text,
    "smtp_port": parse_port,
    "smtp_tls": choice("starttls", "ssl", "none"),
    "smtp_ca_file": parse_tls_file,
    "smtp_user": optional_text,
    "smtp_password": lambda v: str(v) if v else None,
    "alert_email_from": parse_address,
    "alert_email_to": parse_addresses,
}


def shown(setting: Setting, value: Any) -> Any:
    """A value as ``ledgerq config`` and ``repr(Settings)`` show it."""
    if setting.password:
        return MASK if value else None
    if setting.secret and value:
        return mask_url(value)
    return list(value) if isinstance(value, tuple) else value
