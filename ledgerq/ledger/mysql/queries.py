"""``queries.sql`` of the MySQL ledger, loaded by :func:`ledgerq.ledger.sql.load` into
:class:`MyQueries` (a typo in a name is a mypy error; a missing or extra block an
import-time one), its includes spliced from ``ledger/mysql/fragments.sql``.

A parameter a statement reads as an IN list (``t.id IN :ids``) is a SQLAlchemy
expanding parameter: bound as a Python list, sent as one placeholder per item
(MySQL has no array type to bind). The statement text stays the file's.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import TextClause

from ledgerq.ledger.sql import load_in_lists, read_library


@dataclass(frozen=True)
class MyQueries:
    """``ledger/mysql/queries.sql``."""

    insert_task: TextClause
    live_task_by_key: TextClause
    shard_task: TextClause
    take_once_key: TextClause
    once_task_id: TextClause
    set_once_task: TextClause
    due_candidates: TextClause
    lock_due: TextClause
    lock_fenced: TextClause
    claim_locked: TextClause
    claimed: TextClause
    whereabouts: TextClause
    lock_finishing: TextClause
    bury: TextClause
    delete_ended: TextClause
    retry_tasks: TextClause
    lock_beating: TextClause
    still_running: TextClause
    beat: TextClause
    save_checkpoint: TextClause
    try_reconciler_lock: TextClause
    release_reconciler_lock: TextClause
    silent_workers: TextClause
    dead_workers: TextClause
    lapse_dead_subscriptions: TextClause
    select_orphaned: TextClause
    select_expired: TextClause
    count_expired: TextClause
    show_task: TextClause
    stats_live: TextClause
    stats_history: TextClause
    ping: TextClause
    kind_defaults: TextClause
    set_kind_defaults: TextClause
    drop_subscriptions: TextClause
    subscribe: TextClause
    drop_stale_subscriptions: TextClause
    unsubscribe: TextClause
    worker_alive: TextClause
    drop_stale_workers: TextClause
    worker_gone: TextClause
    pool_members: TextClause
    backdate: TextClause
    truncate_tasks: TextClause
    truncate_history: TextClause
    truncate_keys: TextClause
    truncate_kinds: TextClause
    truncate_subscriptions: TextClause
    truncate_workers: TextClause


LIBRARY = read_library("ledgerq.ledger.mysql", "fragments.sql")
MQ: MyQueries = load_in_lists(MyQueries, "ledgerq.ledger.mysql", "queries.sql", LIBRARY)
