"""Settings shared by every component, read from the environment.

``LEDGERQ_DATABASE_URL`` and ``LEDGERQ_AMQP_URL`` name the services; every CLI
command also takes ``--database-url`` and ``--amqp-url``, which win.
``LEDGERQ_CONNECT_WAIT_S`` is how long a starting service retries RabbitMQ.
``LEDGERQ_AMQP_PREFIX`` prefixes every exchange and queue name, so two
deployments (or two test runs) can share one broker without meeting.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ledgerq.ledger.errors import LedgerqError


class ConfigError(LedgerqError, ValueError):
    """An environment variable holds a value ledgerq cannot use."""


DEFAULT_DATABASE_URL = "postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_AMQP_PREFIX = "ledgerq"


@dataclass(frozen=True)
class Settings:
    database_url: str = DEFAULT_DATABASE_URL
    amqp_url: str = DEFAULT_AMQP_URL
    amqp_prefix: str = DEFAULT_AMQP_PREFIX
    #: Server-side guards on every connection ledgerq opens itself (milliseconds).
    statement_timeout_ms: int = 30_000
    idle_in_transaction_timeout_ms: int = 120_000
    #: How long a starting service keeps trying to reach RabbitMQ before giving up.
    connect_wait_s: float = 10.0

    @classmethod
    def from_env(
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        database_url: str | None = None,
        amqp_url: str | None = None,
    ) -> Settings:
        env = os.environ if environ is None else environ
        settings = cls(
            database_url=env.get("LEDGERQ_DATABASE_URL", DEFAULT_DATABASE_URL),
            amqp_url=env.get("LEDGERQ_AMQP_URL", DEFAULT_AMQP_URL),
            amqp_prefix=env.get("LEDGERQ_AMQP_PREFIX", DEFAULT_AMQP_PREFIX),
            connect_wait_s=_seconds(env, "LEDGERQ_CONNECT_WAIT_S", 10.0),
        )
        if database_url:
            settings = replace(settings, database_url=database_url)
        if amqp_url:
            settings = replace(settings, amqp_url=amqp_url)
        return settings


def _seconds(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise ConfigError(f"{name} must be a number of seconds from 0 to 3600, got {raw!r}")
    return value
