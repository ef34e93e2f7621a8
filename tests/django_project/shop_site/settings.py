"""A minimal Django project with ledgerq installed as an app (tests/integration/test_django.py).

The database and the broker come from SHOP_* variables the test sets: a database
of the test's own (PostgreSQL, or MySQL / MariaDB with SHOP_DB_ENGINE=mysql), and a
private AMQP prefix. SHOP_LEDGERQ_EXTRA (JSON) adds keys
to LEDGERQ, for the tests of bad settings.
"""

import importlib.util
import json
import os

SECRET_KEY = "ledgerq-tests-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["ledgerq.contrib.django", "shop"]

# SHOP_DB_ENGINE: "postgresql" (the default, on psycopg 3) or "mysql" (MySQL or
# MariaDB, tests/integration/test_django_mariadb.py).
ENGINE = os.environ.get("SHOP_DB_ENGINE", "postgresql")
# Django's MySQL backend imports MySQLdb: mysqlclient's when it is installed, else
# PyMySQL's stand-in (pure Python: no C build; docs/howto.md, "Django on MySQL").
if ENGINE == "mysql" and importlib.util.find_spec("MySQLdb") is None:
    import pymysql

    pymysql.install_as_MySQLdb()

DATABASES = {
    "default": {
        "ENGINE": f"django.db.backends.{ENGINE}",
        "NAME": os.environ.get("SHOP_DB_NAME", "shop"),
        "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SHOP_DB_PORT", "5432" if ENGINE == "postgresql" else "3306"),
        "USER": os.environ.get("SHOP_DB_USER", "postgres" if ENGINE == "postgresql" else "root"),
        "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
        **({"OPTIONS": {"charset": "utf8mb4"}} if ENGINE == "mysql" else {}),
    }
}

LEDGERQ = {
    # "DATABASE": "default" is the default: the ledger's tables sit beside the shop's.
    "AMQP_URL": os.environ.get("SHOP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    "AMQP_PREFIX": os.environ.get("SHOP_AMQP_PREFIX", "shop"),
    "CONNECT_WAIT_S": 5,
    **json.loads(os.environ.get("SHOP_LEDGERQ_EXTRA", "{}")),
}
