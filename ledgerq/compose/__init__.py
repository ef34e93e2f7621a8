"""The composition root: every service built from :class:`Settings`, in one place.

The CLI, the demo, the benchmark and the tests all build the relay, the worker
and the reconciler through these factories, so the tests run the production
wiring. Each ``open_*`` is an async context manager that checks the services
it needs are reachable (one line of error if not), connects, builds the parts,
and on exit closes everything it opened, in order. Each ``serve_*`` is what a
``ledgerq`` command runs: the service's loop until SIGTERM.

Every ``open_*`` first checks the schema (:func:`check_schema`: PostgreSQL
reachable within the connect wait, the schema at this ledgerq's head), so a
service never starts on a ledger it cannot use. A running relay or worker whose
tables disappear meets :class:`SchemaMissingError` on its next statement; the
``serve_*`` functions watch for it (:class:`~ledgerq.runtime.SchemaWatch`), stop the service as
SIGTERM would, and raise it, so the process ends with one line ("run `ledgerq
migrate`") instead of retrying forever.

This is the one package that sees every other one (pgqueuer's "composition
root" exception to the layers).

One module per service (``relay``, ``worker``, ``reconciler``), one for the
ledgers that tools open on their own (``ledgers``), one for alerting and one
for what watches and stops a service (``monitoring``). The names below are the
ones the CLI, the demo, the benchmark and the tests use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ledgerq.compose.alerting import alert_hook
    from ledgerq.compose.ledgers import (
        one_shard,
        open_dashboard_ledger,
        open_ledger,
        open_operator_ledger,
        topology,
        warn_if_no_autovacuum,
    )
    from ledgerq.compose.reconciler import open_reconciler, retention_config, serve_reconciler
    from ledgerq.compose.relay import open_relay, serve_relay
    from ledgerq.compose.worker import open_worker, scheduling, serve_worker

#: Where each name below lives: imported on first use (PEP 562), so a process that
#: needs one module of the composition root (``ledgerq stats`` opens the operator's
#: ledger, ``ledgerq migrate`` the storage) does not load the others' worlds (the
#: broker client, the worker, the relay, Alembic).
_HOMES = {
    "alert_hook": "alerting",
    "one_shard": "ledgers",
    "open_dashboard_ledger": "ledgers",
    "open_ledger": "ledgers",
    "open_operator_ledger": "ledgers",
    "topology": "ledgers",
    "warn_if_no_autovacuum": "ledgers",
    "open_reconciler": "reconciler",
    "retention_config": "reconciler",
    "serve_reconciler": "reconciler",
    "open_relay": "relay",
    "serve_relay": "relay",
    "open_worker": "worker",
    "scheduling": "worker",
    "serve_worker": "worker",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value


__all__ = [
    "alert_hook",
    "one_shard",
    "open_dashboard_ledger",
    "open_ledger",
    "open_operator_ledger",
    "open_reconciler",
    "open_relay",
    "open_worker",
    "retention_config",
    "scheduling",
    "serve_reconciler",
    "serve_relay",
    "serve_worker",
    "topology",
    "warn_if_no_autovacuum",
]
