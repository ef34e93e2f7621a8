"""``ledgerq.contrib.django``'s settings, without a database: the ledger's URL from a
``DATABASES`` entry, ``settings.LEDGERQ`` as ``LEDGERQ_*`` variables, what is refused,
and what ``enqueue`` says of a Django connection it cannot use.

Django's settings are configured once per process, so the checks run in one child
interpreter (``settings.configure()``) and report as JSON.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from typing import Any

import pytest

from ledgerq.contrib.django.management.commands.ledgerq import without_django_options

SCRIPT = textwrap.dedent(
    """
    import asyncio, json
    import django
    import pymysql
    pymysql.install_as_MySQLdb()  # Django's MySQL backend on PyMySQL (no mysqlclient here)
    from django.conf import settings

    settings.configure(
        INSTALLED_APPS=["ledgerq.contrib.django"],
        DATABASES={
            "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop",
                        "USER": "app", "PASSWORD": "s3cr:t@,x", "HOST": "db.internal",
                        "PORT": 6432, "OPTIONS": {"sslmode": "verify-full",
                        "sslrootcert": "/etc/ca.pem", "isolation_level": 2, "pool": True}},
            "socket": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop",
                       "HOST": "/var/run/postgresql"},
            "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
            "my": {"ENGINE": "django.db.backends.mysql", "NAME": "shop", "USER": "app",
                   "PASSWORD": "s3cr:t", "HOST": "db.internal", "PORT": "3307"},
            "mysock": {"ENGINE": "django.db.backends.mysql", "NAME": "shop",
                       "HOST": "/run/mysqld/mysqld.sock"},
        },
        LEDGERQ={"DATABASE": "socket", "AMQP_PREFIX": "shop", "connect_wait_s": 2.5,
                 "ALERT_EMAIL_TO": ["a@example.com", "b@example.com"], "METRICS_PORT": None},
    )
    django.setup()
    from django.core.exceptions import ImproperlyConfigured
    from django.db import connection, connections
    from ledgerq import aenqueue, enqueue
    from ledgerq.contrib.django import database_url, environ, ledgerq_settings

    def error(call):
        try:
            call()
        except (ImproperlyConfigured, TypeError) as exc:
            return f"{type(exc).__name__}: {exc}"
        return None

    out = {
        "default": database_url("default"),
        "socket": database_url(),
        "environ": environ(),
        "settings_prefix": ledgerq_settings().amqp_prefix,
        "lite": error(lambda: database_url("lite")),
        "my": database_url("my"),
        "mysock": database_url("mysock"),
        "missing": error(lambda: database_url("nope")),
        "enqueue_lite": error(lambda: enqueue(connections["lite"], "k")),
        "aenqueue": error(lambda: asyncio.run(aenqueue(connection, "k"))),
        "aenqueue_my": error(lambda: asyncio.run(aenqueue(connections["my"], "k"))),
    }
    settings.LEDGERQ = {"AMQP_URLS": "amqp://x"}
    out["unknown"] = error(environ)
    settings.LEDGERQ = {"DATABASE": "default", "DATABASE_URL": "postgresql://h/d"}
    out["both"] = error(environ)
    settings.LEDGERQ = {"DATABASE_URL": "postgresql://h/d"}
    out["url"] = environ()["LEDGERQ_DATABASE_URL"]
    settings.LEDGERQ = {"SHARDS": True}
    out["bool"] = error(environ)
    print(json.dumps(out))
    """
)


@pytest.fixture(scope="module")
def report() -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_the_ledger_url_is_built_from_the_django_database(report: dict[str, Any]) -> None:
    # Credentials quoted, libpq's TLS options kept, Django's own options left out.
    assert report["default"] == (
        "postgresql+psycopg://app:s3cr%3At%40%2Cx@db.internal:6432/shop"
        "?sslmode=verify-full&sslrootcert=%2Fetc%2Fca.pem"
    )
    # settings.LEDGERQ['DATABASE'] names the alias; a path as HOST is the socket directory.
    assert report["socket"] == "postgresql+psycopg:///shop?host=%2Fvar%2Frun%2Fpostgresql"
    # Django's MySQL backend: the MySQL ledger on PyMySQL (MySQL or MariaDB, told at connect).
    assert report["my"] == "mysql+pymysql://app:s3cr%3At@db.internal:3307/shop"
    assert report["mysock"] == "mysql+pymysql:///shop?unix_socket=%2Frun%2Fmysqld%2Fmysqld.sock"


def test_settings_ledgerq_becomes_the_ledgerq_variables(report: dict[str, Any]) -> None:
    assert report["environ"] == {
        "LEDGERQ_AMQP_PREFIX": "shop",
        "LEDGERQ_CONNECT_WAIT_S": "2.5",
        "LEDGERQ_ALERT_EMAIL_TO": "a@example.com,b@example.com",
        "LEDGERQ_DATABASE_URL": report["socket"],
    }
    assert report["settings_prefix"] == "shop"
    assert report["url"] == "postgresql://h/d"  # DATABASE_URL: a ledger outside Django's


def test_what_is_refused_is_named(report: dict[str, Any]) -> None:
    assert report["lite"].startswith(
        "ImproperlyConfigured: settings.DATABASES['lite'] uses 'django.db.backends.sqlite3': "
        "ledgerq's ledger is PostgreSQL"
    )
    assert "'nope', which settings.DATABASES does not define" in report["missing"]
    # Django's MySQL connection is sync, on the MySQL ledger as on PostgreSQL's.
    assert report["aenqueue_my"].startswith("TypeError: aenqueue() takes a SQLAlchemy Async")
    assert "Django's database connections are sync" in report["aenqueue_my"]
    assert (
        "settings.LEDGERQ['AMQP_URLS'] is not a ledgerq setting (known: DATABASE,"
        in (report["unknown"])
    )
    assert report["both"].endswith("sets both 'DATABASE' and 'DATABASE_URL': give one")
    assert report["bool"].endswith(
        "settings.LEDGERQ['SHARDS'] is True: expected a string or a number"
    )


def test_enqueue_refuses_a_django_connection_it_cannot_use(report: dict[str, Any]) -> None:
    assert report["enqueue_lite"].startswith("TypeError: enqueue() takes Django's PostgreSQL ")
    assert "on Django's 'sqlite' backend" in report["enqueue_lite"]
    assert report["aenqueue"].endswith(
        "Django's database connections are sync: call enqueue() (from async code, "
        "through asgiref's sync_to_async)"
    )


def test_manage_py_options_are_not_passed_to_ledgerq() -> None:
    args = ["--settings", "x.prod", "-v", "worker", "--pythonpath=/srv", "--concurrency", "4"]
    assert without_django_options(args) == ["-v", "worker", "--concurrency", "4"]


def test_import_ledgerq_imports_no_web_framework() -> None:
    # Django is the django extra's, and the Starlette helper needs no framework at all.
    code = (
        "import sys, ledgerq, ledgerq.contrib.starlette; "
        "print(sorted(m for m in ('django', 'starlette', 'fastapi') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
