"""The operator's Python API: every ``ledgerq`` admin command as a function.

For operators' scripts, notebooks and other services' admin endpoints, what
Celery's ``app.control``, Oban's ``Oban.pause_queue``/``cancel_all_jobs`` and
River's ``JobCancel``/``QueuePause`` are::

    from datetime import timedelta
    from ledgerq import TaskFilter, admin
    from ledgerq.core.config import Settings

    settings = Settings.from_env()           # or an Engine, a Session, a URL
    print(admin.stats(settings).by_status)
    dead = admin.list_tasks(settings, TaskFilter(statuses=("dead",), kind="charge"))
    report = admin.retry(settings, TaskFilter(ids=tuple(t.id for t in dead)),
                         actor="ops:alice", reason="provider back")
    admin.pause(settings, "queue", "emails", reason="SMTP maintenance")
    admin.set_rate_limit(settings, "charge", "20/s")
    admin.purge(settings, timedelta(days=30), dry_run=True).total

Each function takes a *target* first (:mod:`ledgerq.admin.targets`: Settings,
or one database's bind or URL), opens the ledger through the composition root
as the CLI does, does one thing, and returns a typed, frozen result with
``to_json()`` (what the CLI prints for ``--json``). Every function has an
async twin, ``a`` + its name (``astats``, ``aretry``, ...). The ``ledgerq``
CLI calls these functions and keeps only parsing, confirmation, progress bars
and rendering.

=====================================  ==========================================
``ledgerq stats``                      :func:`stats`
``ledgerq show ID | --key K``          :func:`show`
``ledgerq tasks list``                 :func:`list_tasks`
``ledgerq tasks cancel|retry|...``     :func:`act`, :func:`cancel`, :func:`retry`,
                                       :func:`reschedule`, :func:`set_attempts`,
                                       :func:`set_priority`
``ledgerq tasks release-key K``        :func:`release_key`
``ledgerq tasks audit``                :func:`audit`
``ledgerq queues|kinds pause|resume``  :func:`pause`, :func:`resume`
``ledgerq queues list``                :func:`pauses`
``ledgerq kinds list``                 :func:`kinds`
``ledgerq kinds limit K RATE``         :func:`set_rate_limit`
``ledgerq purge``                      :func:`purge`
``ledgerq config``                     :func:`config`
=====================================  ==========================================

Bad input (an unknown status, a malformed rate, an unnamed task) raises a
:class:`~ledgerq.LedgerqError` subclass whose one-line message names the
argument, before anything is read or written. An action changes tasks only
by fenced compare-and-sets and writes one audit record; dry runs write nothing.

Writing ``import ledgerq`` loads no broker client: the composition root is
imported when a function first runs.
"""

from __future__ import annotations

from ledgerq.admin.actions import (
    ActOptions,
    aact,
    acancel,
    act,
    arelease_key,
    areschedule,
    aretry,
    aset_attempts,
    aset_priority,
    cancel,
    release_key,
    reschedule,
    retry,
    set_attempts,
    set_priority,
)
from ledgerq.admin.lookups import aaudit, alist_tasks, ashow, astats, audit, list_tasks, show, stats
from ledgerq.admin.maintenance import aconfig, apurge, config, parse_duration, purge
from ledgerq.admin.reports import ConfigEntry, LiveWorker, PurgeResult, Stats, Unserved, Window
from ledgerq.admin.results import (
    AttemptEntry,
    AuditRecord,
    KindState,
    Pause,
    RateLimitChange,
    TaskAuditEntry,
    TaskDetail,
    TaskRow,
)
from ledgerq.admin.scheduling import (
    akinds,
    apause,
    apauses,
    aresume,
    aset_rate_limit,
    kinds,
    pause,
    pauses,
    resume,
    set_rate_limit,
)
from ledgerq.admin.targets import Target, os_user
from ledgerq.ledger.actions import Action, Report
from ledgerq.ledger.filters import TaskFilter
from ledgerq.ledger.keys import KeyRelease
from ledgerq.ledger.scheduling import PauseReport, RateLimit

__all__ = [
    "ActOptions",
    "Action",
    "AttemptEntry",
    "AuditRecord",
    "ConfigEntry",
    "KeyRelease",
    "KindState",
    "LiveWorker",
    "Pause",
    "PauseReport",
    "PurgeResult",
    "RateLimit",
    "RateLimitChange",
    "Report",
    "Stats",
    "Target",
    "TaskAuditEntry",
    "TaskDetail",
    "TaskFilter",
    "TaskRow",
    "Unserved",
    "Window",
    "aact",
    "aaudit",
    "acancel",
    "aconfig",
    "act",
    "akinds",
    "alist_tasks",
    "apause",
    "apauses",
    "apurge",
    "arelease_key",
    "areschedule",
    "aresume",
    "aretry",
    "aset_attempts",
    "aset_priority",
    "aset_rate_limit",
    "ashow",
    "astats",
    "audit",
    "cancel",
    "config",
    "kinds",
    "list_tasks",
    "os_user",
    "parse_duration",
    "pause",
    "pauses",
    "purge",
    "release_key",
    "reschedule",
    "resume",
    "retry",
    "set_attempts",
    "set_priority",
    "set_rate_limit",
    "show",
    "stats",
]
