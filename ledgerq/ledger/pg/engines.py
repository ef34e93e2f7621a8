"""Engines for the connections ledgerq opens itself, and a reachability check.

No pre-ping on checkout (it would cost a round trip per statement): a pooled
connection that died fails its next statement, SQLAlchemy discards it, and the
caller's retry (every service loop has one) gets a fresh one.

Producers bring their own engine; these are for the relay, the consumers, the
reconciler and the CLI. Every connection carries a statement timeout and an
idle-in-transaction timeout, so a stuck client cannot hold locks or stop vacuum.
They travel as libpq startup ``options``, added after the URL's own
(``?options=-csearch_path%3Dshard0`` keeps the ledger in that schema for every
command, as for ``ledgerq migrate``).

:func:`connect_waiting` is how every command first meets PostgreSQL: it keeps
trying for ``Settings.connect_wait_s`` while the server cannot be reached, and
fails at once, without retrying, when the server answers "no": wrong user or
password (:class:`CredentialsRefusedError`) or no such database
(:class:`SchemaError`: run ``ledgerq migrate``, which creates it), or the
server's TLS certificate is not accepted (wrong CA or host name: a
:class:`ServiceUnavailableError` at once, as for RabbitMQ). libpq reports all
three without an SQLSTATE, so they are told apart by the (English) message.
"""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any

import psycopg
from psycopg import sql
from sqlalchemy import Engine, create_engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from ledgerq.core.config import Settings
from ledgerq.core.errors import (
    ConfigError,
    CredentialsRefusedError,
    LedgerqError,
    SchemaError,
    ServiceUnavailableError,
)
from ledgerq.core.masking import mask_text, mask_url, secrets_of
from ledgerq.ledger.pg.base import first_line

_REFUSED = re.compile(
    r'password authentication failed|role ".*" does not exist|no pg_hba\.conf entry'
    r"|authentication failed|permission denied for database"
)
_NO_DATABASE = re.compile(r'database "(?P<name>.*)" does not exist')
#: libpq's words for a server certificate it did not accept (wrong CA, wrong host
#: name): retrying cannot help, so the command stops at once, as for RabbitMQ.
_CERTIFICATE = re.compile(r"certificate verify failed|does not match host name")
#: One ``host:port`` of a multi-host URL in SQLAlchemy's form (not a socket path).
_HOST_PORT = re.compile(r"^(?P<host>[^/].*):(?P<port>\d+)$")
#: PgBouncer's answer to the startup options ledgerq sends a server by default.
_POOLER_OPTIONS = re.compile(r"unsupported startup parameter: options")
log = logging.getLogger("ledgerq")

#: Seconds between attempts while PostgreSQL cannot be reached.
RETRY_EVERY_S = 0.5


#: Planner settings of the relay's connections. Its due selection (``select_due``)
#: must walk the due index in order and stop at the batch's LIMIT; its filters
#: (pauses, ordering keys, rate limits) make the planner's row estimate tiny when
#: the hot table's statistics are stale (right after a bulk enqueue, before
#: autovacuum analyzes it), and it would then scan and sort the whole backlog
#: for every batch. ``enable_sort=off`` keeps the ordered index scan (a sort that
#: has no alternative, such as the batch's final ordering, still runs). JIT off:
#: the same estimates would compile the statement, 50-100 ms per batch, for a
#: query that runs in about a millisecond.
RELAY_PLANNER = ("jit=off", "enable_sort=off")
#: The relay's own connections: its planner settings, and commits that do not
#: wait for the WAL flush (about 1 ms of each pass at idle, a third of the
#: relay's commit-to-publish time). What the relay writes is state the ledger
#: recovers without it, so a server crash that loses the last few hundred ms of
#: its commits loses no task and runs none twice: a lost mark leaves the row
#: ``pending`` at its epoch (the next pass publishes it again; of two messages
#: with one epoch the claim's fence lets one win, and a claim accepts a pending
#: row); a lost return leaves it ``published`` without a message (the
#: reconciler's stalled-delivery step re-publishes it); a lost rate-limit charge
#: lets that many tasks through again once. A commit that depends on the mark (a
#: worker's claim, a finish) flushes it first: the WAL is one sequence. Never
#: for a worker's, a producer's or an operator's connections.
RELAY_SESSION = (*RELAY_PLANNER, "synchronous_commit=off")
#: A ``--direct`` worker's claims (``claim_due``: select_due, then the claim's
#: UPDATE in the same statement): the relay's, and the UPDATE joined to the
#: picked rows by nested loop. With the statistics stale after a bulk enqueue
#: the planner otherwise hashed every pending row for each batch (90 ms a batch
#: at 36,000 pending, against 3-10 ms).
DIRECT_PLANNER = (
    *RELAY_PLANNER,
    "enable_hashjoin=off",
    "enable_mergejoin=off",
    "enable_bitmapscan=off",
)
#: The worker's own pool (claim, finish, heartbeat) and a batched window's finish
#: (``close_handlers``): each looks its rows up by primary key, a few hundred at
#: most. With the hot table's statistics stale (after a TRUNCATE or a bulk
#: enqueue, or with autovacuum off) the planner took the running rows to be a
#: handful, and hashed or bitmap-scanned all of them for each statement instead
#: (tests/integration/test_running_lookups.py). Generic plans: psycopg prepares a
#: statement from its fifth run, and under the server's default
#: (``plan_cache_mode=auto``) the claim and the finish were planned afresh on
#: every run all the same, 1.2-1.8 ms of each one's bind (the statement log, at
#: idle); their generic plans are the primary-key lookups the settings above ask
#: for, and bind in 0.05-0.1 ms.
WORKER_PLANNER = (
    "jit=off",
    "enable_hashjoin=off",
    "enable_mergejoin=off",
    "enable_bitmapscan=off",
    "plan_cache_mode=force_generic_plan",
)
#: The reconciler's: its selections are estimated like the relay's.
RECONCILER_PLANNER = ("jit=off",)


def url_options(url: str) -> str:
    """The libpq ``options`` the URL itself carries (``?options=-csearch_path%3Dshard0``),
    several joined by spaces; '' when it carries none (or does not parse: the
    engine reports that itself)."""
    try:
        value = make_url(url).query.get("options")
    except ArgumentError:
        return ""
    if value is None:
        return ""
    return " ".join(v for v in ((value,) if isinstance(value, str) else value) if v.strip())


def connect_args(
    settings: Settings,
    application_name: str,
    *,
    pooled: bool,
    planner: tuple[str, ...] = (),
    url: str | None = None,
) -> dict[str, Any]:
    """psycopg's connection arguments: the server-side guards and the ``planner``
    settings (``name=value``) as startup options, after the ``options`` of ``url``
    (default: the ledger's), merged, never replaced: a ``search_path`` there puts
    the ledger in another schema, and ledgerq's own settings come last, so they
    win for the parameters ledgerq sets. Through a transaction pooler (which
    refuses startup options and hands each transaction whichever server connection
    is free), ledgerq adds no options and prepares no statements; the URL's own
    are left as they are, and the guards, the planner settings and a schema are
    then the role's (docs/howto.md, PgBouncer)."""
    args: dict[str, Any] = {"application_name": application_name, "connect_timeout": 5}
    if pooled:
        args["prepare_threshold"] = None
    else:
        ours = (
            f"-c statement_timeout={int(settings.statement_timeout_ms)} -c "
            f"idle_in_transaction_session_timeout={int(settings.idle_in_transaction_timeout_ms)}"
            + "".join(f" -c {setting}" for setting in planner)
        )
        theirs = url_options(settings.database_url if url is None else url)
        args["options"] = f"{theirs} {ours}" if theirs else ours
    return args


def _engine_options(
    settings: Settings, application_name: str, pool_size: int, planner: tuple[str, ...] = ()
) -> dict[str, Any]:
    """A pool of at most ``pool_size`` connections (callers past that wait for one),
    each with the server-side guards set, and the ``planner`` settings if any. An
    engine is on one database: settings that list ledger shards are narrowed first
    (:meth:`Settings.ledger_shard`)."""
    if settings.ledger_shard_count > 1:
        raise ConfigError(
            f"{application_name}: an engine is on one database, and LEDGERQ_DATABASE_URL "
            f"lists {settings.ledger_shard_count} (ledger shards): pick one "
            "(Settings.ledger_shard(k), or ledgerq.Shards for producers)"
        )
    return {
        "pool_size": pool_size,
        "max_overflow": 0,
        "connect_args": connect_args(
            settings,
            application_name,
            pooled=settings.pooled,
            planner=planner,
            url=settings.database_url,
        ),
    }


def sync_engine(settings: Settings, application_name: str, pool_size: int = 5) -> Engine:
    return create_engine(
        settings.database_url, **_engine_options(settings, application_name, pool_size)
    )


def async_engine(
    settings: Settings,
    application_name: str,
    pool_size: int = 5,
    *,
    planner: tuple[str, ...] = (),
) -> AsyncEngine:
    return create_async_engine(
        settings.database_url, **_engine_options(settings, application_name, pool_size, planner)
    )


def session_engine(settings: Settings, application_name: str) -> AsyncEngine | None:
    """One session connection for what a transaction pooler cannot carry (the
    reconciler's advisory lock), or None when the ledger's own engine is one."""
    if not settings.pooled:
        return None
    url = settings.session_database_url
    if url is None:
        raise ConfigError(
            "LEDGERQ_DATABASE_POOLER is transaction, so the reconciler's lock needs a session "
            "connection: set LEDGERQ_DIRECT_DATABASE_URL (PostgreSQL itself, or a "
            "session-mode pool)"
        )
    return create_async_engine(
        url,
        pool_size=1,
        max_overflow=0,
        connect_args=connect_args(settings, application_name, pooled=False, url=url),
    )


def libpq_url(database_url: str) -> str:
    """The SQLAlchemy URL as a plain libpq URL, for raw psycopg connections.

    A multi-host URL in SQLAlchemy's form (``?host=a:5432&host=b:5433``, for a
    primary and its standbys with ``target_session_attrs=read-write``) becomes
    libpq's (``?host=a,b&port=5432,5433``): libpq would take ``a:5432`` for a
    host name, and keep only the last ``host``."""
    url = make_url(database_url).set(drivername="postgresql")
    hosts = url.query.get("host")
    if hosts is not None and (not isinstance(hosts, str) or _HOST_PORT.match(hosts)):
        names, ports = [], []
        for host in (hosts,) if isinstance(hosts, str) else hosts:
            split = _HOST_PORT.match(host)
            names.append(split["host"] if split else host)
            ports.append(split["port"] if split else "")
        query = {"host": ",".join(names)}
        if any(ports):
            query["port"] = ",".join(ports)
        url = url.update_query_dict(query)
    return url.render_as_string(hide_password=False)


def _refusal(exc: psycopg.Error, url: str) -> LedgerqError | None:
    """The error for a server that answered "no", or None if it did not answer."""
    text = str(exc)
    reason = mask_text(_fatal_line(text), secrets_of(url))
    if _REFUSED.search(text):
        return CredentialsRefusedError("PostgreSQL", url, reason)
    if _POOLER_OPTIONS.search(text):
        return ConfigError(
            f"{mask_url(url)} refused the startup parameter 'options' ({reason}): it is a "
            "transaction pooler such as PgBouncer; set LEDGERQ_DATABASE_POOLER=transaction"
        )
    missing = _NO_DATABASE.search(text)
    if missing:
        return SchemaError(
            f'the database "{missing["name"]}" does not exist at {mask_url(url)}: run '
            "`ledgerq migrate` (it creates the database), or fix LEDGERQ_DATABASE_URL / "
            "--database-url"
        )
    return None


def _fatal_line(text: str) -> str:
    """libpq's "connection failed: connection to server ... failed: FATAL: why": the why."""
    line = first_line(Exception(text))
    _, _, why = line.partition("FATAL:")
    return " ".join(why.split()) or line


def connect_waiting(
    settings: Settings, url: str | None = None, *, autocommit: bool = False
) -> psycopg.Connection[Any]:
    """A psycopg connection to ``url`` (default: the ledger), tried for up to
    ``settings.connect_wait_s`` seconds; see the module docstring for what fails at once."""
    target = url or settings.database_url
    # The same startup arguments as the services' engines: a pooler that refuses them
    # is found here, at start, with the setting that fixes it.
    pooled = settings.pooled and target == settings.database_url
    deadline = time.monotonic() + settings.connect_wait_s
    waited = False
    while True:
        remaining = deadline - time.monotonic()
        try:
            return psycopg.connect(
                libpq_url(target),
                autocommit=autocommit,
                **{
                    **connect_args(settings, "ledgerq", pooled=pooled, url=target),
                    "connect_timeout": max(2, min(5, math.ceil(remaining))),
                },
            )
        except psycopg.Error as exc:
            refusal = _refusal(exc, target)
            if refusal is not None:
                raise refusal from exc
            untrusted = _CERTIFICATE.search(str(exc)) is not None
            reason = mask_text(first_line(exc), secrets_of(target))
            if untrusted or time.monotonic() + RETRY_EVERY_S > deadline:
                if settings.connect_wait_s and not untrusted:
                    reason += f" (tried for {settings.connect_wait_s:g} s)"
                raise ServiceUnavailableError("PostgreSQL", target, reason) from exc
            if not waited:  # one line while it waits (-v), not one per attempt
                log.info(
                    "PostgreSQL at %s does not answer yet (%s); trying for up to %g s",
                    mask_url(target),
                    reason,
                    settings.connect_wait_s,
                )
            waited = True
        time.sleep(RETRY_EVERY_S)


def check_database(settings: Settings) -> None:
    """Raise unless PostgreSQL answers (see :func:`connect_waiting`). Behind a
    transaction pooler, warn when the role leaves a guard off (ledgerq cannot set
    them per connection there)."""
    with connect_waiting(settings) as conn:
        conn.execute("SELECT 1")
        if settings.pooled:
            for guard in ("statement_timeout", "idle_in_transaction_session_timeout"):
                row = conn.execute(sql.SQL("SHOW {}").format(sql.Identifier(guard))).fetchone()
                if row is not None and str(row[0]) == "0":
                    log.warning(
                        "%s is off for this role, and through a transaction pooler ledgerq "
                        "cannot set it per connection: ALTER ROLE ... SET %s (docs/howto.md, "
                        "'Run behind PgBouncer')",
                        guard,
                        guard,
                    )
