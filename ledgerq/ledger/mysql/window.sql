-- The worker's batched window on the MySQL ledger (ledger/mysql/window.py):
-- PostgreSQL's lock_running, handler savepoints and end_window of queries.sql.

-- name: lock_running
-- Locks the rows of :ids still running under their fences (:batch's field
-- epoch) for the caller's transaction (the worker's batched window,
-- consumers/window.py): until it commits nobody else can move them, so the
-- fenced finish it runs before its COMMIT wins for every id returned. SKIP
-- LOCKED: it never waits (a heartbeat, a cancel or the reconciler holding a row
-- would otherwise deadlock with it); a row it did not return is busy or moved on,
-- and its task takes the worker's ordinary path. The primary key finds each row.
SELECT t.id
FROM ledgerq_tasks t
WHERE t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED) AND t.status = 'running'
ORDER BY t.id
FOR UPDATE SKIP LOCKED

-- name: window_holder
-- After lock_running locked a row: the transaction holding the locks, as
-- end_window finds it again (this connection's id and its InnoDB transaction's
-- start; reading INNODB_TRX takes the PROCESS privilege, roles.sql).
SELECT trx_mysql_thread_id, trx_started
FROM information_schema.INNODB_TRX
WHERE trx_mysql_thread_id = CONNECTION_ID()

-- name: window_open
-- end_window, first step (from another connection): whether connection :pid is
-- still in the transaction that began at :began.
SELECT trx_id
FROM information_schema.INNODB_TRX
WHERE trx_mysql_thread_id = :pid AND trx_started = :began

-- name: end_window
-- And then ends it: KILL (CONNECTION) rolls that transaction back and releases
-- its row locks. A user may always kill its own connections (roles.sql).
KILL CONNECTION :pid

-- name: open_handlers
-- After lock_running: one savepoint the handlers' savepoints follow, released
-- by close_handlers before the window's finish. On InnoDB it is also the
-- window's proof that its transaction is still the one that locked the rows: a
-- deadlock in a handler rolls the whole transaction back (and the next
-- statement silently begins another), and then this savepoint is gone, so
-- close_handlers (or undo_handler) fails and the window commits nothing.
SAVEPOINT ledgerq_handlers

-- name: close_handlers
-- Releases the window's savepoints (this one and every later one) at once.
RELEASE SAVEPOINT ledgerq_handlers

-- name: mark_handler
-- Before each handler: a savepoint its writes can be undone to alone. One name
-- for all: MySQL replaces a savepoint of the same name (PostgreSQL stacks them),
-- so it always marks the running handler's start.
SAVEPOINT ledgerq_handler

-- name: undo_handler
-- A handler failed: undo its writes, and only its.
ROLLBACK TO SAVEPOINT ledgerq_handler
