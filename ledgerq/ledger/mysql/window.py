"""The worker's batched window on the MySQL ledger (``consumers/window.py`` states
the window's contract): :func:`lock_running`, which :class:`~.tx.MyTx` runs in the
window's transaction, the handlers' savepoint statements (:data:`WQ`, which
:class:`~ledgerq.ledger.within.HandlerMarks` sends on a MySQL connection), and
:func:`end_window`.

The rows: ``lock_running`` locks those still running under their fences, ``FOR
UPDATE SKIP LOCKED`` by primary key, as PostgreSQL's does; until the window's
COMMIT nobody else moves them (a heartbeat skips them, a cancel or the
reconciler waits), so its fenced finish wins for each.

The holder, what names "the transaction that locked" for :func:`end_window`:
the connection's id (``CONNECTION_ID()``, what ``KILL`` takes) and its InnoDB
transaction's start (``INNODB_TRX.trx_started``, read once the rows are locked,
when the transaction surely exists). The connection id alone is not enough: the
pool hands the connection to another window or handler once the window's thread
returns, and ``KILL`` would then end that one's transaction. Neither server
exposes a transaction's start more finely than to the second, nor a transaction
id another connection can rely on (a transaction that only locked may show a
provisional one), so a transaction that began on the same connection within the
same second still matches: the pool must have taken the connection back in that
second, that is the hung handler returned just as the worker gave up on it.
What it costs then is that other transaction, rolled back as if its connection
had dropped (a window's tasks re-run, uncharged; an ordinary handler's attempt
fails and is retried); never a write committed twice or a fence lost. The same
holds for the instant between :func:`end_window`'s check and its ``KILL``
(MySQL has no conditional kill). Reading ``INNODB_TRX`` takes the PROCESS
privilege (roles.sql grants it to ``ledgerq_service``): without it the holder is
None and an abandoned window ends only when its thread returns (its locks held
until then: the heartbeat skips them, others wait ``innodb_lock_wait_timeout``).

``KILL`` needs no privilege for the login's own connections, on MySQL and on
MariaDB alike (other logins' take CONNECTION_ADMIN or SUPER): the worker's
connections all share its login.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, TextClause

from ledgerq.ledger.model import Fence
from ledgerq.ledger.mysql.base import error_number
from ledgerq.ledger.mysql.plans import Plan, keyed
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.protocol import Locked
from ledgerq.ledger.sql import load_in_lists

#: ER_SPECIFIC_ACCESS_DENIED_ERROR (INNODB_TRX without PROCESS), ER_NO_SUCH_THREAD.
NO_PROCESS_PRIVILEGE = 1227
NO_SUCH_THREAD = 1094


@dataclass(frozen=True)
class WindowQueries:
    """``ledger/mysql/window.sql``."""

    lock_running: TextClause
    window_holder: TextClause
    window_open: TextClause
    end_window: TextClause
    open_handlers: TextClause
    close_handlers: TextClause
    mark_handler: TextClause
    undo_handler: TextClause


WQ = load_in_lists(WindowQueries, "ledgerq.ledger.mysql", "window.sql", LIBRARY)


def lock_running(fences: Sequence[Fence]) -> Plan[Locked]:
    """Lock the rows still running under ``fences``; the ids, and the holder if any."""
    epochs = dict(sorted(fences))
    if not epochs:
        return Locked(set(), None)
    batch = keyed({i: {"epoch": e} for i, e in epochs.items()})
    locked = yield WQ.lock_running, {"ids": list(epochs), "batch": batch}
    ids = {int(r[0]) for r in locked.rows}
    if not ids:
        return Locked(ids, None)
    try:
        holder = yield WQ.window_holder, {}
    except Exception as exc:
        if error_number(getattr(exc, "orig", None) or exc) != NO_PROCESS_PRIVILEGE:
            raise
        return Locked(ids, None)  # MySQL rolled back the statement alone: the locks stay
    row = holder.rows[0] if holder.rows else None
    return Locked(ids, (int(row[0]), row[1]) if row is not None else None)


def end_window(conn: Connection, pid: int, began: datetime) -> bool:
    """Kill connection ``pid`` if it is still in the transaction that began at
    ``began`` (module docstring); whether it was."""
    if conn.execute(WQ.window_open, {"pid": pid, "began": began}).first() is None:
        return False
    try:
        conn.execute(WQ.end_window, {"pid": pid})
    except Exception as exc:
        if error_number(getattr(exc, "orig", None) or exc) == NO_SUCH_THREAD:
            return False  # it ended between the check and the kill
        raise
    return True
