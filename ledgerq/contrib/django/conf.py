"""ledgerq's settings under Django: ``settings.LEDGERQ`` and the Django database.

``settings.LEDGERQ`` is a dict. Its keys are ledgerq's settings by field name,
upper case (``AMQP_URL``, ``AMQP_PREFIX``, ``QUEUE_TYPE``, ``CONNECT_WAIT_S``,
``METRICS_PORT``, ``ALERT_WEBHOOK``, ...: the ``LEDGERQ_*`` environment variables
without their prefix, docs/reference.md#environment-variables), plus:

- ``DATABASE``: the alias of the Django database the ledger is in (default
  ``"default"``). Its ``DATABASES`` entry becomes the ledger's URL
  (:func:`database_url`).
- ``DATABASE_URL``, instead of ``DATABASE``, for a ledger that is not one of
  Django's databases.

A value given in ``settings.LEDGERQ`` wins over the environment variable of the
same setting (the settings module is where a Django project decides; read the
environment there if a value should come from it); a command-line option wins
over both. An unknown key, a database that is neither PostgreSQL on psycopg 3 nor
MySQL / MariaDB (Django's MySQL backend, docs/howto.md "Django on MySQL"), and
a bad value are ``ImproperlyConfigured`` or :class:`~ledgerq.core.errors.ConfigError`
naming the key, found by ``manage.py check`` as well.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections
from sqlalchemy.engine import URL

from ledgerq.core.config import ConfigError, Settings
from ledgerq.core.settings_table import BY_FIELD, SETTINGS

#: Keys of ``settings.LEDGERQ`` that are not a ledgerq setting of their own.
DATABASE_KEY = "DATABASE"
#: libpq connection parameters a ``DATABASES`` entry's ``OPTIONS`` may carry, passed
#: on in the ledger's URL (TLS, timeouts, a service file). Django's own options
#: (``isolation_level``, ``pool``, ``server_side_binding``, ...) are not libpq's and
#: are left out, as is ``options``: ledgerq sets its own session guards.
LIBPQ_OPTIONS = frozenset(
    {
        "sslmode",
        "sslrootcert",
        "sslcert",
        "sslkey",
        "sslpassword",
        "sslcrl",
        "sslcrldir",
        "sslnegotiation",
        "sslsni",
        "channel_binding",
        "gssencmode",
        "target_session_attrs",
        "connect_timeout",
        "keepalives",
        "keepalives_idle",
        "keepalives_interval",
        "keepalives_count",
        "tcp_user_timeout",
        "passfile",
        "service",
    }
)


def configured() -> Mapping[str, Any]:
    """``settings.LEDGERQ``, or an empty dict."""
    conf = getattr(settings, "LEDGERQ", None)
    if conf is None:
        return {}
    if not isinstance(conf, Mapping):
        raise ImproperlyConfigured(
            f"settings.LEDGERQ must be a dict of ledgerq settings, not {type(conf).__name__}"
        )
    return conf


def database_url(alias: str | None = None) -> str:
    """The ledger's SQLAlchemy URL (``postgresql+psycopg://user:password@host:port/name``;
    on Django's MySQL backend ``mysql+pymysql://...``: :func:`_mysql_url`) from the
    ``DATABASES`` entry ``alias`` (``settings.LEDGERQ['DATABASE']``, else
    ``"default"``): ``NAME``, ``USER``, ``PASSWORD``, ``HOST`` (a path: the socket
    directory), ``PORT``, and the libpq parameters of ``OPTIONS`` (``sslmode`` etc.).
    While Django's test runner runs, that is its test database."""
    alias = alias or configured().get(DATABASE_KEY) or DEFAULT_DB_ALIAS
    if alias not in settings.DATABASES:
        raise ImproperlyConfigured(
            f"settings.LEDGERQ['DATABASE'] is {alias!r}, which settings.DATABASES does not "
            f"define (it defines {', '.join(map(repr, settings.DATABASES)) or 'none'})"
        )
    wrapper = connections[alias]
    entry = wrapper.settings_dict  # the test database's name while Django's tests run
    if wrapper.vendor == "mysql":
        return _mysql_url(entry)
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"settings.DATABASES[{alias!r}] uses {entry.get('ENGINE')!r}: ledgerq's ledger is "
            "PostgreSQL (django.db.backends.postgresql) or MySQL / MariaDB "
            "(django.db.backends.mysql)"
        )
    _require_psycopg3(alias)
    host = entry.get("HOST") or None
    query = {
        key: str(value)
        for key, value in (entry.get("OPTIONS") or {}).items()
        if key in LIBPQ_OPTIONS and value is not None
    }
    if host and host.startswith("/"):  # a Unix socket directory, as libpq takes it
        query["host"], host = host, None
    port = entry.get("PORT")
    url = URL.create(
        "postgresql+psycopg",
        username=entry.get("USER") or None,
        password=entry.get("PASSWORD") or None,
        host=host,
        port=int(port) if port else None,
        database=entry.get("NAME") or None,
        query=query,
    )
    return url.render_as_string(hide_password=False)


def _mysql_url(entry: Mapping[str, Any]) -> str:
    """The MySQL ledger's URL (``mysql+pymysql://user:password@host:port/name``; the
    server, MySQL or MariaDB, is told when the ledger connects) from a ``DATABASES``
    entry on Django's MySQL backend: ``NAME``, ``USER``, ``PASSWORD``, ``HOST`` (a
    path: the Unix socket), ``PORT``. The ledger's own connections run on PyMySQL
    whatever driver Django's run on (mysqlclient, or PyMySQL as ``MySQLdb``);
    ``enqueue(connection, ...)`` runs on Django's (ledger/mysql/raw.py)."""
    host = entry.get("HOST") or None
    query = {}
    if host and host.startswith("/"):
        query["unix_socket"], host = host, None
    port = entry.get("PORT")
    url = URL.create(
        "mysql+pymysql",
        username=entry.get("USER") or None,
        password=entry.get("PASSWORD") or None,
        host=host,
        port=int(port) if port else None,
        database=entry.get("NAME") or None,
        query=query,
    )
    return url.render_as_string(hide_password=False)


def _require_psycopg3(alias: str) -> None:
    try:
        from django.db.backends.postgresql.psycopg_any import is_psycopg3
    except ImportError:  # Django before 4.2: psycopg2 only
        raise ImproperlyConfigured(
            "ledgerq.contrib.django needs Django 4.2 or later (on psycopg 3)"
        ) from None
    if not is_psycopg3:
        raise ImproperlyConfigured(
            f"Django's connection {alias!r} runs on psycopg2: ledgerq takes psycopg 3, which "
            "Django 4.2+ uses when it is installed (pip install 'psycopg[binary]')"
        )


def _text(key: str, value: Any) -> str:
    """A value as its environment variable would spell it."""
    if isinstance(value, list | tuple | set | frozenset):
        return ",".join(str(v) for v in value)
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ImproperlyConfigured(
            f"settings.LEDGERQ[{key!r}] is {value!r}: expected a string or a number"
        )
    return str(value)


def environ() -> dict[str, str]:
    """``settings.LEDGERQ`` and the ledger's database as ``LEDGERQ_*`` environment
    variables: what ``manage.py ledgerq`` puts in its environment before it runs the
    command (so that any process it starts has them too)."""
    conf = dict(configured())
    alias = conf.pop(DATABASE_KEY, None)
    env: dict[str, str] = {}
    for key, value in conf.items():
        setting = BY_FIELD.get(str(key).lower())
        if setting is None:
            known = ", ".join([DATABASE_KEY, *(s.field.upper() for s in SETTINGS)])
            raise ImproperlyConfigured(
                f"settings.LEDGERQ[{key!r}] is not a ledgerq setting (known: {known})"
            )
        if value is not None:
            env[setting.env] = _text(key, value)
    if "LEDGERQ_DATABASE_URL" in env:
        if alias is not None:
            raise ImproperlyConfigured(
                "settings.LEDGERQ sets both 'DATABASE' and 'DATABASE_URL': give one"
            )
    else:
        env["LEDGERQ_DATABASE_URL"] = database_url(alias)
    return env


def ledgerq_settings() -> Settings:
    """ledgerq's :class:`~ledgerq.core.config.Settings` for this Django project: the
    environment, then ``settings.LEDGERQ`` and the ledger's database over it (for the
    Python admin API, or an embedded service). A bad value is a ConfigError naming its
    ``settings.LEDGERQ`` key."""
    ours = environ()
    try:
        return Settings.from_env({**os.environ, **ours})
    except ConfigError as exc:
        raise ConfigError(named(str(exc), ours)) from None


def named(message: str, ours: Mapping[str, str]) -> str:
    """``message`` with each ``LEDGERQ_X`` that ``settings.LEDGERQ`` set named as its key
    there (the ledger's URL: as the Django database it came from)."""
    for env in sorted(ours, key=len, reverse=True):
        key = env.removeprefix("LEDGERQ_")
        where = f"settings.LEDGERQ[{key!r}]"
        if env == "LEDGERQ_DATABASE_URL" and key not in configured():
            where = "the ledger's URL (from settings.DATABASES)"
        message = message.replace(env, where)
    return message
