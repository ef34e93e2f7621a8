"""How each setting's raw value (text from the environment or the command line,
or a value given to :class:`~ledgerq.core.config.Settings` directly) becomes a
checked value.

Every parser takes one raw value and returns the parsed value, or raises
:class:`ValueError` with a message that completes the sentence "<setting name>
...": it says what is expected and shows the value with its secrets masked.
:mod:`ledgerq.core.config` names the setting and gathers the lines into one
:class:`~ledgerq.core.errors.ConfigError`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from ledgerq.core.limits import MAX_LEDGER_SHARDS
from ledgerq.core.masking import mask_url, split_urls
from ledgerq.core.tls import AMQP_TLS_URL_PARAMETERS

#: The ledger's URLs: PostgreSQL through psycopg 3 (``postgresql://`` read as it), or
#: MySQL / MariaDB through PyMySQL (ledger/mysql/; the async paths derive aiomysql's
#: URL from it). Plain ``mysql://`` would be mysqlclient's: refused by name.
DATABASE_DRIVERS = ("postgresql+psycopg", "postgresql", "mysql+pymysql", "mariadb+pymysql")
#: The drivers of the MySQL / MariaDB ledger (ledger/mysql/).
MYSQL_DRIVERS = ("mysql+pymysql", "mariadb+pymysql")
AMQP_SCHEMES = ("amqp", "amqps")
EVENT_LOOPS = ("uvloop", "asyncio")
_PREFIX = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")
_DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*[:.][A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_ADDRESS = re.compile(r"[^\s@,<>\"]+@[^\s@,<>\"]+")


def parse_database_urls(value: object) -> str:
    """One database URL, or several separated by commas: the ledger shards, in
    order (:mod:`ledgerq.ledger.split.ids`)."""
    urls = split_urls(str(value))
    if len(urls) > MAX_LEDGER_SHARDS:
        raise ValueError(
            f"lists {len(urls)} databases; ledgerq takes at most {MAX_LEDGER_SHARDS} ledger shards"
        )
    parsed = [parse_database_url(url) for url in urls]
    if len(set(parsed)) != len(parsed):
        raise ValueError(f"lists a database twice: {mask_url(str(value))!r}")
    return ",".join(parsed)


def parse_database_url(value: object) -> str:
    text = str(value)
    expected = "expected a URL such as postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq"
    try:
        url = make_url(text)
        _ = url.port
    except (ArgumentError, ValueError, TypeError):
        raise ValueError(
            f"(the ledger) is not a database URL: {mask_url(text)!r} ({expected})"
        ) from None
    if url.drivername not in DATABASE_DRIVERS:
        raise ValueError(
            f"(the ledger) uses the driver {url.drivername!r}, which ledgerq does "
            f"not support: {mask_url(text)!r} (supported: "
            f"{', '.join(d + '://' for d in DATABASE_DRIVERS)})"
        )
    if url.drivername == "postgresql":
        return "postgresql+psycopg" + text[len("postgresql") :]
    return text


def is_mysql_url(url: str) -> bool:
    """Whether ``url`` (one parsed database URL) names the MySQL / MariaDB ledger."""
    return url.split("://", 1)[0] in MYSQL_DRIVERS


def parse_amqp_url(value: object) -> str:
    """One AMQP URL, or several separated by commas (the nodes of a cluster: the
    services connect to whichever answers, in order, and fail over to the next)."""
    urls = split_urls(str(value))
    return ",".join(_parse_one_amqp_url(url) for url in urls)


def _parse_one_amqp_url(text: str) -> str:
    expected = "expected a URL such as amqp://guest@127.0.0.1:5672/ or amqps://..."
    try:
        parts = urlsplit(text)
        host, _ = parts.hostname, parts.port
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in AMQP_SCHEMES or not host:
        raise ValueError(f"(RabbitMQ) is not an AMQP URL: {mask_url(text)!r} ({expected})")
    tls = sorted({k for k, _ in parse_qsl(parts.query) if k in AMQP_TLS_URL_PARAMETERS})
    if tls:
        raise ValueError(
            f"(RabbitMQ) carries the TLS parameter(s) {', '.join(tls)} in its query: "
            f"{mask_url(text)!r} (one AMQP client would refuse or ignore them; give files "
            "with LEDGERQ_AMQP_CA_FILE, LEDGERQ_AMQP_CERT_FILE, LEDGERQ_AMQP_KEY_FILE)"
        )
    return text


def parse_prefix(value: object) -> str:
    text = str(value)
    if not _PREFIX.fullmatch(text) or text.startswith("amq."):
        raise ValueError(
            f"(RabbitMQ names) must be 1-100 letters, digits, '.', '_' or '-', starting with "
            f"a letter or digit and not with 'amq.', got {text!r}"
        )
    return text


def number(low: int, high: int, unit: str, kind: type[float] | type[int]) -> Callable[[Any], Any]:
    def parse(value: Any) -> float | int:
        try:
            number = kind(value)
        except (TypeError, ValueError, OverflowError):
            number = low - 1
        if not low <= number <= high:
            raise ValueError(f"must be a number of {unit} from {low} to {high}, got {value!r}")
        return number

    return parse


def parse_event_loop(value: object) -> str:
    text = str(value)
    if text not in EVENT_LOOPS:
        raise ValueError(f"must be {' or '.join(EVENT_LOOPS)}, got {text!r}")
    return text


def choice(*choices: str) -> Callable[[Any], str]:
    def parse(value: Any) -> str:
        if str(value) not in choices:
            raise ValueError(f"must be {', '.join(choices[:-1])} or {choices[-1]}, got {value!r}")
        return str(value)

    return parse


def optional_text(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    if any(c in text for c in "\r\n\x00"):
        raise ValueError("must be one line")
    return text or None


def parse_port(value: Any) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError, OverflowError):
        port = -1
    if not 0 <= port <= 65535:
        raise ValueError(f"must be a TCP port from 0 (none) to 65535, got {value!r}")
    return port


def parse_callable_path(value: Any) -> str | None:
    text = optional_text(value)
    if text is not None and not _DOTTED.fullmatch(text):
        raise ValueError(f"must be a dotted path such as package.module:function, got {text!r}")
    return text


def parse_addresses(value: Any) -> tuple[str, ...]:
    items = value if isinstance(value, tuple | list) else str(value).split(",")
    addresses = tuple(a.strip() for a in items if str(a).strip())
    for address in addresses:
        if not _ADDRESS.fullmatch(address):
            raise ValueError(f"must be comma-separated email addresses, got {address!r}")
    return addresses


def parse_address(value: Any) -> str | None:
    text = optional_text(value)
    return parse_addresses(text)[0] if text else None
