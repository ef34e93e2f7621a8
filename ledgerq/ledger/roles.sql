-- Least-privilege roles for ledgerq, derived statement by statement from
-- queries.sql, operations.sql, inspection.sql (stats_live, stats_history,
-- show_task) and the migrations. Five group roles (NOLOGIN); give each login user the group of
-- the process it runs (docs/security.md, "Database roles", says how and why).
-- ledger/sql.py loads the blocks by name (each is a script of several
-- statements, for psql or one call without parameters);
-- tests/integration/test_db_roles.py runs producers, relay, worker, reconciler
-- and the CLI under them, and checks that docs/security.md shows these same
-- statements.

-- name: create_roles
-- Once per cluster, by a superuser or a role with CREATEROLE.
CREATE ROLE ledgerq_migrator NOLOGIN;
CREATE ROLE ledgerq_producer NOLOGIN;
CREATE ROLE ledgerq_service NOLOGIN;
CREATE ROLE ledgerq_operator NOLOGIN;
CREATE ROLE ledgerq_admin NOLOGIN IN ROLE ledgerq_operator;

-- name: grant_schema
-- Once per database, before the first `ledgerq migrate`, by the database's
-- owner: the migrator creates ledgerq's tables, sequence, function and trigger
-- (and Alembic's version table) in the schema; the others only look names up.
GRANT USAGE, CREATE ON SCHEMA public TO ledgerq_migrator;
GRANT USAGE ON SCHEMA public TO ledgerq_producer, ledgerq_service, ledgerq_operator;

-- name: grant_objects
-- After every `ledgerq migrate`, by the migrator (the objects' owner).
--
-- Producer: insert_task and insert_tasks name these columns (the id comes
-- from the sequence's nextval, the rest from their defaults); RETURNING id and
-- live_id_by_dedupe_key read id, kind and dedupe_key. The wake-up trigger
-- runs with the producer's rights and calls only pg_notify, which every role
-- may call.
GRANT INSERT (id, kind, queue, payload, business_key, dedupe_key, priority, shard, run_at,
              status, max_attempts, retry, timeout_s, parent_id, trace_context, ordering_key,
              expires_at, tags)
    ON ledgerq_tasks TO ledgerq_producer;
GRANT SELECT (id, kind, dedupe_key) ON ledgerq_tasks TO ledgerq_producer;
GRANT USAGE ON SEQUENCE ledgerq_task_id_seq TO ledgerq_producer;
-- once=True (insert_task_once, insert_tasks_once): the permanent key is taken
-- with a nextval id, which the task row then carries, and looked up on a
-- duplicate.
GRANT INSERT (kind, key, task_id), SELECT (kind, key, task_id)
    ON ledgerq_unique_keys TO ledgerq_producer;
-- result() (results.sql): ended_results reads how a task stands in either
-- table, and a process with waiters announces them in ledgerq_waiting
-- (migration 0021), which every statement that ends tasks reads.
GRANT SELECT (id, kind, status, result, last_error, attempts, max_attempts, created_at,
              started_at, finished_at)
    ON ledgerq_tasks, ledgerq_history TO ledgerq_producer;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_waiting TO ledgerq_producer, ledgerq_service;
-- Relay, worker and reconciler: every column of a live row is read (finish
-- moves whole rows, RETURNING t.*); only the columns the claim, heartbeat,
-- checkpoint, publication and finish statements set can be updated (and
-- FOR UPDATE needs one of them); finish deletes a finished row and inserts it
-- into history; whereabouts and finish read back these history columns. The
-- advisory lock, LISTEN and the start checks (the version table aside) need
-- no grant.
GRANT SELECT, DELETE ON ledgerq_tasks TO ledgerq_service;
GRANT UPDATE (status, epoch, attempts, publishes, run_at, published_at, started_at,
              heartbeat_at, lease_until, worker, checkpoint, last_error, suspect, attempt_log,
              progress, route, sticky_worker, sticky_until)
    ON ledgerq_tasks TO ledgerq_service;
GRANT INSERT ON ledgerq_history TO ledgerq_service;
GRANT SELECT (id, kind, attempts, status, last_error, ordering_key, result, max_attempts,
              created_at, started_at, finished_at, parent_id)
    ON ledgerq_history TO ledgerq_service;
-- Scheduling (select_due, select_overdue): the relay and the reconciler read
-- the pauses, and the relay locks and charges the token buckets; a worker
-- registers its kinds' rate limits and ordering at start (register_limits,
-- register_ordering, register_children_done). The key probe reads dead history
-- rows' ordering_key. The fan-out triggers (migration 0010) run as the migrator:
-- no grant on ledgerq_families.
GRANT SELECT ON ledgerq_pauses TO ledgerq_service;
GRANT SELECT, INSERT (kind, rate_per_s, burst, tokens, ordering, on_children_done, sticky_s,
                      max_attempts, retry, timeout_s),
      UPDATE (rate_per_s, burst, tokens, refilled_at, updated_at, ordering, on_children_done,
              sticky_s, max_attempts, retry, timeout_s)
    ON ledgerq_kinds TO ledgerq_service;
-- Routing: a worker registers what it serves (subscribe, unsubscribe); the
-- relay and the reconciler read it (ledgerq_route, in select_due and the rest).
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_subscriptions TO ledgerq_service;
-- Liveness (migration 0017): a worker beats its row (worker_alive, worker_gone);
-- the reconciler reads them (ledgerq_worker_dead, in dead_workers).
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_workers TO ledgerq_service;
-- The window (migration 0014): ledgerq_pick reads the due rule's view and locks
-- the rows it picks through it (FOR UPDATE on a view needs UPDATE on one of its
-- columns), and the live routes' windows; the reconciler takes back what was
-- published to a route nobody serves and audits it (unpublish_unserved).
GRANT SELECT, UPDATE (epoch) ON ledgerq_ready TO ledgerq_service;
GRANT SELECT ON ledgerq_windows TO ledgerq_service, ledgerq_operator;
GRANT SELECT (id, matched, changed, skipped), INSERT,
      UPDATE (matched, changed, skipped, finished_at)
    ON ledgerq_audit TO ledgerq_service;
GRANT SELECT (audit_id, task_id), INSERT ON ledgerq_audit_tasks TO ledgerq_service;
GRANT USAGE ON SEQUENCE ledgerq_audit_id_seq TO ledgerq_service;
-- Operator: `ledgerq stats`, `show`, `tasks list` and `tasks audit` read the
-- tables whole.
GRANT SELECT ON ledgerq_tasks, ledgerq_history, ledgerq_audit, ledgerq_audit_tasks,
                ledgerq_pauses, ledgerq_kinds, ledgerq_families, ledgerq_subscriptions,
                ledgerq_key_releases, ledgerq_workers, ledgerq_waiting
    TO ledgerq_operator;
-- Retention (the reconciler's pass) and `ledgerq purge`: history's day
-- partitions are created, dropped and purged only through these functions,
-- which run as the migrator (SECURITY DEFINER); neither role may DELETE from
-- history or own a table.
GRANT EXECUTE ON FUNCTION ledgerq_history_add_day(text, date),
                          ledgerq_history_drop_day(text, date),
                          ledgerq_history_purge(text, timestamptz, integer)
    TO ledgerq_service, ledgerq_operator;
-- Admin (a member of the operator group, so it reads what the operator reads):
-- `ledgerq tasks cancel | retry | reschedule | set-attempts | set-priority`
-- (operations.sql): cancel_queued moves rows to history, retry_history moves
-- them back (with their own id: no sequence), the others set these columns;
-- each batch adds its audit lines. `ledgerq tasks release-key` (release_key)
-- records the deaths it releases in ledgerq_key_releases (migration 0015).
GRANT DELETE ON ledgerq_tasks, ledgerq_history TO ledgerq_admin;
GRANT INSERT ON ledgerq_history, ledgerq_audit_tasks, ledgerq_key_releases TO ledgerq_admin;
GRANT INSERT (id, kind, queue, payload, business_key, dedupe_key, priority, shard, run_at, status,
              attempts, max_attempts, retry, epoch, publishes, checkpoint, last_error, timeout_s,
              parent_id, created_at, attempt_log, trace_context, ordering_key, tags)
    ON ledgerq_tasks TO ledgerq_admin;
GRANT UPDATE (status, run_at, epoch, published_at, publishes, max_attempts, priority,
              cancel_requested_at)
    ON ledgerq_tasks TO ledgerq_admin;
GRANT INSERT, UPDATE (matched, changed, skipped, finished_at) ON ledgerq_audit TO ledgerq_admin;
GRANT USAGE ON SEQUENCE ledgerq_audit_id_seq TO ledgerq_admin;
-- `ledgerq queues|kinds pause|resume` and `ledgerq kinds limit` (scheduling.sql).
GRANT INSERT, DELETE ON ledgerq_pauses TO ledgerq_admin;
GRANT INSERT (kind, rate_per_s, burst, tokens), UPDATE (rate_per_s, burst, tokens, updated_at)
    ON ledgerq_kinds TO ledgerq_admin;

-- The dashboard's rollup (migration 0008), counted by the reconciler's pass
-- (overview.sql roll_up, prune_rollup: it reads the finished rows' times and
-- errors) and read by `ledgerq dashboard`, which runs as an operator (or as an
-- admin, for its actions).
GRANT SELECT (queue, run_at, created_at, published_at, started_at, finished_at)
    ON ledgerq_history TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_rollup_counts, ledgerq_rollup_latency
    TO ledgerq_service;
GRANT SELECT, UPDATE ON ledgerq_rollup_state TO ledgerq_service;
GRANT SELECT ON ledgerq_rollup_counts, ledgerq_rollup_latency, ledgerq_rollup_state
    TO ledgerq_operator;
-- Every command but `migrate` and the producer's enqueue checks the schema's
-- revision at start.
GRANT SELECT ON ledgerq_alembic_version TO ledgerq_service, ledgerq_operator;
-- ... and which ledger shard the database says it is (migration 0012).
GRANT SELECT ON ledgerq_ledger_shard TO ledgerq_service, ledgerq_operator;
-- Dependencies (migration 0020): the worker reads its dependencies' results
-- (ctx.dependencies), show and the reconciler's safety net read the edges; the
-- producer's check, the edges' insert and the release run as the migrator.
GRANT SELECT ON ledgerq_dependencies TO ledgerq_service, ledgerq_operator;
-- Retention prunes the edges of tasks it has purged (migration 0022), through a
-- function that runs as the migrator, like history's purge.
GRANT EXECUTE ON FUNCTION ledgerq_dependencies_prune(timestamptz, integer)
    TO ledgerq_service, ledgerq_operator;
GRANT SELECT (result) ON ledgerq_history TO ledgerq_service;
