"""The dashboard's settings, from the environment, validated.

=============================  ==================================================
``LEDGERQ_DASHBOARD_PASSWORD`` the password of the sign-in form (with the user
                               ``LEDGERQ_DASHBOARD_USER``, default ``admin``)
``LEDGERQ_DASHBOARD_TOKEN``    a token, accepted in the sign-in form's password
                               field or as ``Authorization: Bearer <token>``
``LEDGERQ_DASHBOARD_SECRET``   the key that signs session cookies; unset: a random
                               one per process (sessions end when it restarts,
                               and several replicas need the same one)
=============================  ==================================================

With neither a password nor a token the dashboard has no sign-in, and then it
only binds a loopback address (:func:`check_bind`). A bad value is a
:class:`~ledgerq.core.errors.ConfigError` naming the variable (exit 78).
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from ledgerq.core.errors import ConfigError

MIN_PASSWORD = 8
MIN_TOKEN = 16
MIN_SECRET = 32
_USER = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
#: The actor of an action when no sign-in is configured (loopback only).
LOCAL_USER = "local"


@dataclass(frozen=True, repr=False)
class DashboardSettings:
    password: str | None = None
    token: str | None = None
    user: str = "admin"
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    #: Whether ``secret`` was generated for this process (not configured).
    secret_generated: bool = True

    def __post_init__(self) -> None:
        if self.password is not None and len(self.password) < MIN_PASSWORD:
            raise ConfigError(
                f"LEDGERQ_DASHBOARD_PASSWORD must be at least {MIN_PASSWORD} characters"
            )
        if self.token is not None and len(self.token) < MIN_TOKEN:
            raise ConfigError(f"LEDGERQ_DASHBOARD_TOKEN must be at least {MIN_TOKEN} characters")
        if not _USER.match(self.user):
            raise ConfigError(
                f"LEDGERQ_DASHBOARD_USER must be 1-64 letters, digits or _ . @ -, got {self.user!r}"
            )
        if len(self.secret) < MIN_SECRET:
            raise ConfigError(
                f"LEDGERQ_DASHBOARD_SECRET must be at least {MIN_SECRET} characters "
                "(python -c 'import secrets; print(secrets.token_urlsafe(48))')"
            )

    def __repr__(self) -> str:  # never print a secret
        return (
            f"DashboardSettings(user={self.user!r}, password={'set' if self.password else None},"
            f" token={'set' if self.token else None}, secret_generated={self.secret_generated})"
        )

    @property
    def auth_configured(self) -> bool:
        return self.password is not None or self.token is not None

    def secrets(self) -> list[str]:
        """What must never appear in a page or a log."""
        return [s for s in (self.password, self.token, self.secret) if s]

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DashboardSettings:
        env = os.environ if env is None else env

        def get(name: str) -> str | None:
            value = env.get(f"LEDGERQ_DASHBOARD_{name}", "")
            return value if value != "" else None

        password, token, user = get("PASSWORD"), get("TOKEN"), get("USER") or "admin"
        secret = get("SECRET")
        if secret is None:
            return cls(password=password, token=token, user=user)
        return cls(password=password, token=token, user=user, secret=secret, secret_generated=False)


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (or ``localhost``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, settings: DashboardSettings) -> None:
    """Refuse a non-loopback address unless a password or token is configured."""
    if not is_loopback(host) and not settings.auth_configured:
        raise ConfigError(
            f"refusing to serve the dashboard on {host} without authentication: set "
            "LEDGERQ_DASHBOARD_PASSWORD or LEDGERQ_DASHBOARD_TOKEN (or bind 127.0.0.1)"
        )
