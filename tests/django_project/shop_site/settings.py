"""A minimal Django project with ledgerq installed as an app (tests/integration/test_django.py).

The database and the broker come from SHOP_* variables the test sets: a database
of the test's own, and a private AMQP prefix. SHOP_LEDGERQ_EXTRA (JSON) adds keys
to LEDGERQ, for the tests of bad settings.
"""

import json
import os

SECRET_KEY = "ledgerq-tests-only"
DEBUG = False
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
INSTALLED_APPS = ["ledgerq.contrib.django", "shop"]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # on psycopg 3
        "NAME": os.environ.get("SHOP_DB_NAME", "shop"),
        "HOST": os.environ.get("SHOP_DB_HOST", "127.0.0.1"),
        "PORT": os.environ.get("SHOP_DB_PORT", "5432"),
        "USER": os.environ.get("SHOP_DB_USER", "postgres"),
        "PASSWORD": os.environ.get("SHOP_DB_PASSWORD", ""),
    }
}

LEDGERQ = {
    # "DATABASE": "default" is the default: the ledger's tables sit beside the shop's.
    "AMQP_URL": os.environ.get("SHOP_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
    "AMQP_PREFIX": os.environ.get("SHOP_AMQP_PREFIX", "shop"),
    "CONNECT_WAIT_S": 5,
    **json.loads(os.environ.get("SHOP_LEDGERQ_EXTRA", "{}")),
}
