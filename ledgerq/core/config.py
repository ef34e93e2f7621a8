"""Settings shared by every component: one table, read from the environment and
the command line, validated once at start.

Every setting has an environment variable; those that make sense per run also
have a global CLI option, which wins (:data:`SETTINGS` lists them). A bad value
is refused before anything connects, with one line per bad value that names
the setting (the option if it came from the command line, else the variable),
shows the value with its secrets masked, and says what is expected
(:class:`~ledgerq.core.errors.ConfigError`). A :class:`Settings` built
directly (embedding, tests) is checked the same way, naming its fields.

The ledger is PostgreSQL through psycopg 3: ``postgresql+psycopg://`` and
``postgresql://`` (which SQLAlchemy would otherwise give to psycopg2, and which
ledgerq reads as psycopg 3); or MySQL 8.0+ / MariaDB 10.6+ through PyMySQL,
``mysql+pymysql://`` or ``mariadb+pymysql://`` (ledger/mysql/, issue 29: part of
the seam so far, docs/guarantees.md). Any other driver is refused by name, never
rewritten. ``LEDGERQ_AMQP_PREFIX`` prefixes every exchange and queue name, so
two deployments (or two test runs) can share one broker without meeting.

TLS to RabbitMQ is configured here once, for both AMQP clients (aio-pika in the
relay and the worker, pika in the reconciler), which read different URL
parameters: an ``amqps://`` URL, plus ``LEDGERQ_AMQP_CA_FILE`` (and optionally
``LEDGERQ_AMQP_CERT_FILE`` / ``LEDGERQ_AMQP_KEY_FILE``).
:meth:`Settings.amqp_ssl_context` builds the one :class:`ssl.SSLContext` both
adapters get: it verifies the broker's certificate chain (against the CA file,
else the system's CAs) and its host name, and there is no switch to turn that
off. The files are read at start, so a missing or unreadable one is a
:class:`ConfigError`; so are TLS parameters in the URL itself (each client
rejects or ignores the other's), and TLS files with an ``amqp://`` URL.
PostgreSQL's TLS stays in its URL, as libpq parameters (``?sslmode=verify-full
&sslrootcert=/path/ca.pem``), which every connection ledgerq opens passes on.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any
from urllib.parse import urlsplit

from ledgerq.core.errors import ConfigError as ConfigError
from ledgerq.core.masking import mask_url, split_urls
from ledgerq.core.settings_table import (
    BY_FIELD,
    DEFAULT_AMQP_PREFIX,
    DEFAULT_AMQP_URL,
    DEFAULT_DATABASE_URL,
    PARSERS,
    SETTINGS,
    shown,
)
from ledgerq.core.tls import TLSFileError, amqp_context
from ledgerq.core.values import is_mysql_url


@dataclass(frozen=True, repr=False)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    #: ``transaction`` when database_url is a transaction-pooling proxy (PgBouncer):
    #: no startup options, no server-side prepared statements (ledger/pg/engines.py).
    database_pooler: str = "none"
    #: A session connection (PostgreSQL itself, or a session pool) for what needs one.
    direct_database_url: str | None = None
    amqp_url: str = DEFAULT_AMQP_URL
    amqp_prefix: str = DEFAULT_AMQP_PREFIX
    #: ``classic`` or ``quorum`` broker queues (ledgerq/broker/topology.py).
    queue_type: str = "classic"
    #: Server-side guards on every connection ledgerq opens itself (milliseconds).
    statement_timeout_ms: int = 30_000
    idle_in_transaction_timeout_ms: int = 120_000
    #: How long a starting command keeps trying to reach PostgreSQL and RabbitMQ.
    connect_wait_s: float = 10.0
    #: The event loop services run on (``uvloop`` or ``asyncio``).
    event_loop: str = "uvloop"
    #: TLS to RabbitMQ (amqps:// only): the CA file, and a client certificate and key.
    amqp_ca_file: str | None = None
    amqp_cert_file: str | None = None
    amqp_key_file: str | None = None
    #: Retention per terminal status, in days (0: kept forever); see relay/retention.py.
    retention_succeeded_days: float = 7.0
    retention_dead_days: float = 90.0
    retention_cancelled_days: float = 30.0
    #: A task due this long is published ahead of every priority (0: never); see
    #: docs/reference.md#priorities-and-aging.
    priority_aging_s: float = 300.0
    #: How many shards tasks are spread over (``ledgerq worker --shards``); see
    #: ledgerq.ledger.sharding.
    shards: int = 1
    #: ``latest``: after an outage a periodic task runs once for the latest missed
    #: period; ``none``: missed periods are skipped (see ledgerq.consumers.periodic).
    periodic_catch_up: str = "latest"
    #: ``text`` or ``json`` log lines.
    log_format: str = "text"
    #: Port of the services' metrics and health endpoints (0: not served).
    metrics_port: int = 0
    #: Dead-task alert channels (each unset: off); see :mod:`ledgerq.alerting`.
    alert_webhook: str | None = None
    alert_callable: str | None = None
    smtp_host: str | None = None
    smtp_port: int = 0
    smtp_tls: str = "starttls"
    smtp_ca_file: str | None = None
    smtp_user: str | None = None
    smtp_password: str | None = None
    alert_email_from: str | None = None
    alert_email_to: tuple[str, ...] = ()
    #: Where each value came from: ``--flag``, ``ENV_VAR`` or ``default`` (from_env).
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = {s.field: self.sources.get(s.field) or f"Settings.{s.field}" for s in SETTINGS}
        values, problems = _parse({f: getattr(self, f) for f in names}, names)
        if problems:
            raise ConfigError("\n".join(problems))
        for name, value in values.items():  # normalised (postgresql:// -> +psycopg)
            object.__setattr__(self, name, value)
        self._check_amqp_tls()
        self._check_smtp()
        self._check_ledger_shards()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **options: Any) -> Settings:
        """Settings from ``environ`` (default ``os.environ``) and CLI ``options``
        (keyword per field; ``None`` means the option was not given). Raises
        :class:`ConfigError` with one line per bad value."""
        env = os.environ if environ is None else environ
        unknown = set(options) - set(BY_FIELD)
        if unknown:
            raise TypeError(f"unknown settings: {sorted(unknown)}")
        raw: dict[str, Any] = {}
        sources: dict[str, str] = {}
        for setting in SETTINGS:
            value = options.get(setting.field)
            if value is not None and value != "":
                raw[setting.field], sources[setting.field] = value, setting.flag or setting.env
            elif env.get(setting.env, "") != "":
                raw[setting.field], sources[setting.field] = env[setting.env], setting.env
            else:
                sources[setting.field] = "default"
        values, problems = _parse(raw, sources)
        if problems:
            raise ConfigError("\n".join(problems))
        return cls(**values, sources=sources)

    def amqp_ssl_context(self) -> ssl.SSLContext | None:
        """The TLS context of both AMQP clients (see :func:`~ledgerq.core.tls.amqp_context`);
        a file that cannot be used is a :class:`ConfigError` naming its setting (found at
        start: every Settings builds one context to check)."""
        try:
            return amqp_context(
                self.amqp_url, self.amqp_ca_file, self.amqp_cert_file, self.amqp_key_file
            )
        except TLSFileError as exc:
            names = " / ".join(self._label(f) for f in exc.fields)
            raise ConfigError(str(exc).replace("{setting}", names)) from None

    def _label(self, name: str) -> str:
        """How a message names a setting: where its value came from, else its variable
        (settings read from the environment) or its field (a Settings built directly)."""
        source = self.sources.get(name)
        if source and source != "default":
            return source
        return BY_FIELD[name].env if self.sources else f"Settings.{name}"

    def _check_amqp_tls(self) -> None:
        """TLS files that do not fit the URL, or cannot be loaded, are a ConfigError."""
        if self.amqp_key_file and not self.amqp_cert_file:
            raise ConfigError(
                f"{self._label('amqp_key_file')} is set without "
                f"{self._label('amqp_cert_file')} (the certificate it belongs to)"
            )
        tls_files = [f for f in ("amqp_ca_file", "amqp_cert_file") if getattr(self, f)]
        if tls_files and urlsplit(self.amqp_url).scheme != "amqps":
            raise ConfigError(
                f"{self._label(tls_files[0])} is set but {self._label('amqp_url')} is not "
                f"amqps:// ({mask_url(self.amqp_url)!r}): use amqps:// for TLS"
            )
        if tls_files:
            self.amqp_ssl_context()

    def _check_smtp(self) -> None:
        """Email alerts need a sender and recipients; credentials never go in clear."""
        if not self.smtp_host:
            return
        for name in ("alert_email_from", "alert_email_to"):
            if not getattr(self, name):
                raise ConfigError(
                    f"{self._label('smtp_host')} is set but {self._label(name)} is not"
                )
        if bool(self.smtp_user) != bool(self.smtp_password):
            raise ConfigError(
                f"{self._label('smtp_user')} and {self._label('smtp_password')} go together"
            )
        if self.smtp_user and self.smtp_tls == "none":
            raise ConfigError(
                f"{self._label('smtp_tls')} is none but {self._label('smtp_user')} is set: "
                "ledgerq does not send SMTP credentials unencrypted (use starttls or ssl)"
            )

    def _check_ledger_shards(self) -> None:
        servers = {is_mysql_url(url) for url in self.database_urls}
        if len(servers) > 1:
            raise ConfigError(
                f"{self._label('database_url')} lists MySQL / MariaDB and PostgreSQL "
                "databases: the ledger shards are all on one kind of server (each server "
                "has its own schema, revisions and statements; docs/howto.md, 'Split the "
                "ledger across databases')"
            )
        if self.on_mysql and self.pooled:
            raise ConfigError(
                f"{self._label('database_url')} is a MySQL / MariaDB ledger, which takes no "
                "LEDGERQ_DATABASE_POOLER (poolers are PostgreSQL's: docs/guarantees.md, "
                "'On MySQL and MariaDB')"
            )
        if self.direct_database_url is None:
            return
        urls, directs = split_urls(self.database_url), split_urls(self.direct_database_url)
        if len(urls) != len(directs):
            raise ConfigError(
                f"{self._label('direct_database_url')} lists {len(directs)} database(s) but "
                f"{self._label('database_url')} lists {len(urls)}: give one direct URL per "
                "ledger shard, in the same order"
            )

    @property
    def database_urls(self) -> tuple[str, ...]:
        """The ledger shards' databases, in shard order (one: an unsplit ledger)."""
        return tuple(split_urls(self.database_url))

    @property
    def on_mysql(self) -> bool:
        """Whether the ledger is MySQL / MariaDB (ledger/mysql/), not PostgreSQL."""
        return any(is_mysql_url(url) for url in self.database_urls)

    @property
    def ledger_shard_count(self) -> int:
        return len(self.database_urls)

    def ledger_shard(self, index: int) -> Settings:
        """These settings narrowed to ledger shard ``index``: its database URL (and
        direct URL), everything else the same."""
        urls = self.database_urls
        if not 0 <= index < len(urls):
            raise ConfigError(
                f"there is no ledger shard {index}: {self._label('database_url')} lists "
                f"{len(urls)} database(s) (shards 0 to {len(urls) - 1})"
            )
        if len(urls) == 1:
            return self
        direct = self.direct_database_url
        return replace(
            self,
            database_url=urls[index],
            direct_database_url=None if direct is None else split_urls(direct)[index],
        )

    def ledger_shards(self) -> list[Settings]:
        """:meth:`ledger_shard` of every shard, in order."""
        return [self.ledger_shard(k) for k in range(self.ledger_shard_count)]

    @property
    def pooled(self) -> bool:
        """Whether database_url is a transaction pooler (no session state survives a
        transaction there)."""
        return self.database_pooler == "transaction"

    @property
    def session_database_url(self) -> str | None:
        """A URL whose connections are sessions (LISTEN, advisory locks, DDL): the
        direct URL if given, else the ledger's own unless that is a transaction pooler."""
        return self.direct_database_url or (None if self.pooled else self.database_url)

    @property
    def amqp_urls(self) -> tuple[str, ...]:
        """The broker nodes of ``amqp_url``, in the order they are tried."""
        return tuple(split_urls(self.amqp_url))

    def secret_urls(self) -> tuple[str, ...]:
        return tuple(getattr(self, s.field) or "" for s in SETTINGS if s.secret)

    def passwords(self) -> tuple[str, ...]:
        """Secrets given whole (the SMTP password), for the log filter."""
        return tuple(
            getattr(self, s.field) for s in SETTINGS if s.password and getattr(self, s.field)
        )

    def masked(self) -> dict[str, Any]:
        """Every setting's value, the URLs with their secrets masked, passwords hidden."""
        return {s.field: shown(s, getattr(self, s.field)) for s in SETTINGS}

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={value!r}" for name, value in self.masked().items())
        return f"Settings({values})"


def _parse(raw: Mapping[str, Any], names: Mapping[str, str]) -> tuple[dict[str, Any], list[str]]:
    """Each raw value parsed by its field's parser; the lines for the bad ones."""
    values: dict[str, Any] = {}
    problems: list[str] = []
    for name, value in raw.items():
        try:
            values[name] = PARSERS[name](value)
        except ValueError as exc:
            problems.append(f"{names[name]} {exc}")
    return values, problems


assert set(PARSERS) == set(BY_FIELD) == {f.name for f in fields(Settings)} - {"sources"}
