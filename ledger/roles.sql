-- Least-privilege roles for ledgerq, derived statement by statement from
-- queries.sql, inspection.sql (stats_live, stats_history, show_task) and the
-- migrations. Four group roles (NOLOGIN); give each login user the group of
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
GRANT INSERT (kind, queue, payload, business_key, dedupe_key, priority, shard, run_at, status,
              max_attempts, retry, timeout_s, parent_id, trace_context)
    ON ledgerq_tasks TO ledgerq_producer;
GRANT SELECT (id, kind, dedupe_key) ON ledgerq_tasks TO ledgerq_producer;
GRANT USAGE ON SEQUENCE ledgerq_task_id_seq TO ledgerq_producer;
-- Relay, worker and reconciler: every column of a live row is read (finish
-- moves whole rows, RETURNING t.*); only the columns the claim, heartbeat,
-- checkpoint, publication and finish statements set can be updated (and
-- FOR UPDATE needs one of them); finish deletes a finished row and inserts it
-- into history; whereabouts and finish read back these history columns. The
-- advisory lock, LISTEN and the start checks (the version table aside) need
-- no grant.
GRANT SELECT, DELETE ON ledgerq_tasks TO ledgerq_service;
GRANT UPDATE (status, epoch, attempts, publishes, run_at, published_at, started_at,
              heartbeat_at, lease_until, worker, checkpoint, last_error)
    ON ledgerq_tasks TO ledgerq_service;
GRANT INSERT ON ledgerq_history TO ledgerq_service;
GRANT SELECT (id, kind, attempts, status, last_error) ON ledgerq_history TO ledgerq_service;
-- Operator: `ledgerq stats` and `ledgerq show` read both tables whole.
GRANT SELECT ON ledgerq_tasks, ledgerq_history TO ledgerq_operator;
-- Every command but `migrate` and the producer's enqueue checks the schema's
-- revision at start.
GRANT SELECT ON ledgerq_alembic_version TO ledgerq_service, ledgerq_operator;
