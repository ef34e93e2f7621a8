"""The Django app: no models (so no migrations), and a system check of ``settings.LEDGERQ``."""

from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from ledgerq.contrib.django.conf import ledgerq_settings
from ledgerq.core.errors import ConfigError


def check_ledgerq_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """``manage.py check`` (and runserver, migrate, ...) reports a bad ``settings.LEDGERQ``
    or a ledger database ledgerq cannot use, one error per problem, without connecting."""
    try:
        ledgerq_settings()
    except (ImproperlyConfigured, ConfigError) as exc:
        return [checks.Error(line, id="ledgerq.E001") for line in str(exc).splitlines()]
    return []


class LedgerqConfig(AppConfig):
    name = "ledgerq.contrib.django"
    label = "ledgerq"
    verbose_name = "ledgerq"

    def ready(self) -> None:
        checks.register(check_ledgerq_settings)
