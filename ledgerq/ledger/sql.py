"""Load named SQL from a ``.sql`` file into ``text()`` clauses.

Each package keeps its SQL in one file of ``-- name: <name>`` blocks; a typed
dataclass lists the names so a typo is a mypy error, and a missing or extra
block is an import-time error.

A rule several statements share is written once, as a ``-- fragment: <name>``
block of ``fragments.sql``, and a statement includes it with ``{{<name>}}``
(:func:`parse` splices it in, so a loaded statement, what ``EXPLAIN`` and the
database see, is the whole text: nothing is composed at run time). A fragment
may include other fragments the same way (a cycle is an import-time error), and
may take parameters: ``-- fragment: <name>(<p>, ...)`` names them, its body
reads each as ``{{<p>}}``, and an include gives their values in order,
``{{<name>(<value>, ...)}}``; a value is spliced in as written (an SQL literal
such as ``'dead'``, a column such as ``e.task_id``), so each instance is a
statement of its own with its values as constants. An unknown fragment, a wrong
count of values, or a parameter the body never reads is an import-time error;
tests/unit/test_rules_once.py checks that each fragment is used and that no
statement restates one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from importlib import resources
from typing import TypeVar

from sqlalchemy import TextClause, bindparam, text

_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_FRAGMENT_HEADER = re.compile(
    r"^--\s*fragment:\s*([a-z_][a-z0-9_]*(?:\([a-z0-9_,\s]*\))?)\s*$", re.MULTILINE
)
_SIGNATURE = re.compile(r"([a-z_][a-z0-9_]*)(?:\(([^)]*)\))?")
#: ``{{name}}`` or ``{{name(value, ...)}}``; a value holds no comma, bracket or brace.
_INCLUDE = re.compile(r"\{\{\s*([a-z_][a-z0-9_]*)\s*(?:\(([^(){}]*)\))?\s*\}\}")

T = TypeVar("T")


@dataclass(frozen=True)
class Fragment:
    """A ``-- fragment:`` block: its parameters' names and its SQL."""

    parameters: tuple[str, ...]
    body: str


def _blocks(source: str, header: re.Pattern[str], what: str) -> dict[str, str]:
    parts = header.split(source)
    named: dict[str, str] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in named:
            raise ValueError(f"{what} {name!r} is defined twice")
        lines = [ln for ln in body.strip().splitlines() if not ln.lstrip().startswith("--")]
        named[name] = "\n".join(lines).strip()
    return named


def _read(package: str, filename: str) -> str:
    return resources.files(package).joinpath(filename).read_text(encoding="utf-8")


def _words(listed: str | None) -> tuple[str, ...]:
    """``a, b`` as ``("a", "b")``; None (no brackets) as ``()``."""
    if listed is None:
        return ()
    words = tuple(w.strip() for w in listed.split(","))
    return () if words == ("",) else words


def fragments(source: str) -> dict[str, Fragment]:
    """The ``-- fragment:`` blocks of ``source``, checked: each parameter read by its
    body and named once, and no fragment including itself, directly or not."""
    library: dict[str, Fragment] = {}
    for signature, body in _blocks(source, _FRAGMENT_HEADER, "fragment").items():
        match = _SIGNATURE.fullmatch(re.sub(r"\s+", "", signature))
        assert match, signature  # the header's pattern admits only signatures
        name, parameters = match[1], _words(match[2])
        if name in library:
            raise ValueError(f"fragment {name!r} is defined twice")
        if len(set(parameters)) != len(parameters):
            raise ValueError(f"fragment {name!r} names a parameter twice")
        read = {m[1] for m in _INCLUDE.finditer(body) if m[2] is None}
        if unread := sorted(set(parameters) - read):
            raise ValueError(f"fragment {name!r} never reads its parameters {unread}")
        library[name] = Fragment(parameters, body)
    for name in library:
        _check_cycles(library, (name,))
    return library


def _check_cycles(library: Mapping[str, Fragment], path: tuple[str, ...]) -> None:
    fragment = library[path[-1]]
    for match in _INCLUDE.finditer(fragment.body):
        name = match[1]
        if (name in fragment.parameters and match[2] is None) or name not in library:
            continue  # a parameter's value, or an unknown name (reported where it is used)
        if name in path:
            raise ValueError(f"fragments include each other: {' -> '.join((*path, name))}")
        _check_cycles(library, (*path, name))


#: ``fragments.sql``: ``{name: fragment}``, the rules several statements share.
LIBRARY: dict[str, Fragment] = fragments(_read("ledgerq.ledger", "fragments.sql"))
#: ``{name: sql}`` of :data:`LIBRARY`, each body as written (its includes kept).
FRAGMENTS: dict[str, str] = {name: fragment.body for name, fragment in LIBRARY.items()}


def expand(
    sql: str,
    library: Mapping[str, Fragment] | None = None,
    values: Mapping[str, str] | None = None,
    within: tuple[str, ...] = (),
) -> str:
    """``sql`` with each include replaced by its fragment, expanded in turn (``values``:
    the parameters of the fragment ``sql`` is the body of, the last of ``within``)."""
    known = LIBRARY if library is None else library
    bound = values or {}

    def splice(match: re.Match[str]) -> str:
        name, given = match[1], match[2]
        if name in bound and given is None:
            return bound[name]
        if name not in known:
            raise ValueError(f"unknown fragment {{{{{name}}}}} (fragments.sql has {sorted(known)})")
        if name in within:
            raise ValueError(f"fragments include each other: {' -> '.join((*within, name))}")
        fragment, arguments = known[name], _words(given)
        if len(arguments) != len(fragment.parameters) or "" in arguments:
            raise ValueError(
                f"{{{{{name}}}}} takes {len(fragment.parameters)} values "
                f"{fragment.parameters}, given {match[0]}"
            )
        body = expand(
            fragment.body, known, dict(zip(fragment.parameters, arguments)), (*within, name)
        )
        # indented like the line that includes it, so the statement reads as one text
        line_start = match.string.rfind("\n", 0, match.start()) + 1
        indent = " " * (match.start() - line_start)
        return body.replace("\n", "\n" + indent)

    return _INCLUDE.sub(splice, sql)


def parse(source: str, library: Mapping[str, Fragment] | None = None) -> dict[str, str]:
    """Split a file of named blocks into ``{name: sql}``, its fragments spliced in."""
    named = _blocks(source, _HEADER, "query")
    return {name: expand(sql, library) for name, sql in named.items()}


def read_library(package: str, filename: str) -> dict[str, Fragment]:
    """The ``-- fragment:`` blocks of ``package/filename``: another implementation's
    shared rules (the MySQL ledger's, ledger/mysql/fragments.sql), apart from
    :data:`LIBRARY`."""
    return fragments(_read(package, filename))


def load(
    cls: type[T], package: str, filename: str, library: Mapping[str, Fragment] | None = None
) -> T:
    """Build ``cls`` (a dataclass of TextClause fields) from ``package/filename``, its
    includes spliced from ``library`` (default: :data:`LIBRARY`, fragments.sql)."""
    named = parse(_read(package, filename), library)
    wanted = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    if wanted != set(named):
        missing, extra = sorted(wanted - set(named)), sorted(set(named) - wanted)
        raise RuntimeError(f"{package}/{filename}: missing {missing}, unexpected {extra}")
    return cls(**{name: text(sql) for name, sql in named.items()})


#: A parameter a statement reads as an IN list (``t.id IN :ids``).
_IN_LIST = re.compile(r"\bIN\s+:(\w+)", re.IGNORECASE)


def load_in_lists(
    cls: type[T], package: str, filename: str, library: Mapping[str, Fragment] | None = None
) -> T:
    """:func:`load`, each parameter a statement reads as an IN list (``x IN :ids``)
    marked expanding: bound as a Python list, sent as one placeholder per item. For
    servers with no array to bind (MySQL, MariaDB); the statement text stays the
    file's."""
    loaded = load(cls, package, filename, library)
    marked = {}
    for f in fields(loaded):  # type: ignore[arg-type]
        clause: TextClause = getattr(loaded, f.name)
        lists = sorted(set(_IN_LIST.findall(clause.text)))
        marked[f.name] = clause.bindparams(*(bindparam(name, expanding=True) for name in lists))
    return cls(**marked)


@dataclass(frozen=True)
class LedgerQueries:
    """``queries.sql``: every statement that writes a task, and the services' reads."""

    insert_task: TextClause
    insert_tasks: TextClause
    live_id_by_dedupe_key: TextClause
    insert_task_once: TextClause
    insert_tasks_once: TextClause
    once_task_id: TextClause
    select_due: TextClause
    publish_due: TextClause
    kind_durations: TextClause
    register_limits: TextClause
    register_ordering: TextClause
    register_sticky: TextClause
    register_children_done: TextClause
    register_defaults: TextClause
    mark_published: TextClause
    return_unpublished: TextClause
    claim: TextClause
    whereabouts: TextClause
    finish: TextClause
    lock_running: TextClause
    open_handlers: TextClause
    close_handlers: TextClause
    mark_handler: TextClause
    undo_handler: TextClause
    end_window: TextClause
    heartbeat: TextClause
    save_checkpoint: TextClause
    try_reconciler_lock: TextClause
    release_reconciler_lock: TextClause
    select_stalled: TextClause
    select_overdue: TextClause
    unpublish_unserved: TextClause
    expire_due: TextClause
    silent_workers: TextClause
    dead_workers: TextClause
    lapse_dead_subscriptions: TextClause
    select_orphaned: TextClause
    select_expired: TextClause


@dataclass(frozen=True)
class InspectionQueries:
    """``inspection.sql``: read-only questions, and maintenance for bench, demo and tests."""

    stats_live: TextClause
    stats_history: TextClause
    show_task: TextClause
    ping: TextClause
    count_expired: TextClause
    autovacuum_off: TextClause
    count_finished: TextClause
    drain_span: TextClause
    timings: TextClause
    truncate: TextClause
    truncate_subscriptions: TextClause
    reset_rollup: TextClause
    clear_finished: TextClause
    seed_history: TextClause
    seed_varied_history: TextClause
    lowest_synthetic_id: TextClause
    vacuum_history: TextClause
    checkpoint: TextClause


@dataclass(frozen=True)
class RetentionQueries:
    """``retention.sql``: history's day partitions and the purge of finished rows."""

    database_now: TextClause
    history_days: TextClause
    add_history_day: TextClause
    drop_history_day: TextClause
    purge_history_batch: TextClause
    prune_dependencies: TextClause
    count_purgeable: TextClause


@dataclass(frozen=True)
class OperationsQueries:
    """``operations.sql``: the operator's listing, actions and audit trail."""

    list_tasks: TextClause
    cancel_queued: TextClause
    family: TextClause
    live_descendants: TextClause
    request_cancel: TextClause
    retry_history: TextClause
    reschedule: TextClause
    set_max_attempts: TextClause
    set_priority: TextClause
    insert_audit: TextClause
    record_audit_batch: TextClause
    list_audit: TextClause
    task_audit: TextClause
    key_holders: TextClause
    key_tasks: TextClause
    release_key: TextClause


@dataclass(frozen=True)
class SchedulingQueries:
    """``scheduling.sql``: the operator's pauses and rate limits."""

    pause: TextClause
    unpublish_paused: TextClause
    resume: TextClause
    list_pauses: TextClause
    set_limit: TextClause
    list_kinds: TextClause


@dataclass(frozen=True)
class RoutingQueries:
    """``routing.sql``: the workers' subscriptions (what part of a queue each serves)."""

    subscribe: TextClause
    unsubscribe: TextClause
    list_subscriptions: TextClause
    unserved: TextClause
    list_windows: TextClause
    worker_alive: TextClause
    worker_gone: TextClause
    pool_members: TextClause


@dataclass(frozen=True)
class RoleGrants:
    """``roles.sql``: the least-privilege roles (docs/security.md, "Database roles").
    Each block is a script of several statements with no parameters, for psql or for
    one call of a driver's simple-query protocol; nothing in ledgerq runs them itself."""

    create_roles: TextClause
    grant_schema: TextClause
    grant_objects: TextClause


@dataclass(frozen=True)
class ShardQueries:
    """``shards.sql``: each database's ledger shard (migration 0012)."""

    assign_shard: TextClause
    shard_identity: TextClause
    shard_table_exists: TextClause


Q: LedgerQueries = load(LedgerQueries, "ledgerq.ledger", "queries.sql")
IQ: InspectionQueries = load(InspectionQueries, "ledgerq.ledger", "inspection.sql")
RQ: RetentionQueries = load(RetentionQueries, "ledgerq.ledger", "retention.sql")
OQ: OperationsQueries = load(OperationsQueries, "ledgerq.ledger", "operations.sql")
SQ: SchedulingQueries = load(SchedulingQueries, "ledgerq.ledger", "scheduling.sql")
UQ: RoutingQueries = load(RoutingQueries, "ledgerq.ledger", "routing.sql")
ROLES: RoleGrants = load(RoleGrants, "ledgerq.ledger", "roles.sql")
HQ: ShardQueries = load(ShardQueries, "ledgerq.ledger", "shards.sql")


@dataclass(frozen=True)
class OverviewQueries:
    """``overview.sql``: the dashboard's overview, and the rollup that keeps it fast."""

    rollup_span: TextClause
    roll_up: TextClause
    prune_rollup: TextClause
    rolled_upto: TextClause
    live_counts: TextClause
    throughput: TextClause
    latency: TextClause
    dead_errors: TextClause
    workers: TextClause
    children: TextClause


VQ: OverviewQueries = load(OverviewQueries, "ledgerq.ledger", "overview.sql")


@dataclass(frozen=True)
class DirectQueries:
    """``direct.sql``: the ledger-direct path's claim (consumers/direct.py)."""

    claim_due: TextClause


DQ: DirectQueries = load(DirectQueries, "ledgerq.ledger", "direct.sql")


@dataclass(frozen=True)
class DependencyQueries:
    """``dependencies.sql``: ``after=`` (ledger/after.py, migration 0020)."""

    after_check: TextClause
    after_add: TextClause
    release_stuck: TextClause
    dependency_results: TextClause
    task_graph: TextClause


AQ: DependencyQueries = load(DependencyQueries, "ledgerq.ledger", "dependencies.sql")


@dataclass(frozen=True)
class ResultsQueries:
    """``results.sql``: where tasks stand, for result() waiters and ``ctx.children``."""

    ended_results: TextClause
    child_results: TextClause
    announce_waiting: TextClause
    withdraw_waiting: TextClause


XQ: ResultsQueries = load(ResultsQueries, "ledgerq.ledger", "results.sql")
