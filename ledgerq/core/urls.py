"""The SQLAlchemy URL of a psycopg 3 connection, read from its ``info``.

One place for what both the admin API (:mod:`ledgerq.admin.targets`) and the
test helpers (:mod:`ledgerq.testing.binds`) do with a psycopg connection they are
given as a bind: name the same database on the psycopg 3 driver, password
included (they open connections of their own there). psycopg is not imported
here: ``info`` is read by attribute, so the core loads no driver.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import URL


def psycopg_url(info: Any) -> URL:
    """The URL of a psycopg 3 connection, from its ``info`` (password included; a
    Unix-socket host travels in the query, as libpq names it)."""
    host = str(info.host or "")
    query = {"host": host} if host.startswith("/") else {}
    return URL.create(
        "postgresql+psycopg",
        username=info.user or None,
        password=info.password or None,
        host=None if query or not host else host,
        port=int(info.port) if info.port else None,
        database=info.dbname or None,
        query=query,
    )
