-- Least-privilege roles for the MySQL / MariaDB ledger (docs/security.md,
-- "Database roles on MySQL and MariaDB"), derived from the MySQL ledger's
-- statements (ledger/mysql/*.sql) and its migrations. The same five group
-- roles as on PostgreSQL; give each login user the role of the process it runs
-- and make it the user's default role. Each block is a script of several
-- statements without parameters, run in the ledger's database (the table names
-- are unqualified). tests/integration/test_mariadb_roles.py runs them, then
-- producers, a worker and the reconciler under them, and checks that
-- docs/security.md shows these same statements.

-- name: create_roles
-- Once per server, by an account that may CREATE ROLE.
CREATE ROLE IF NOT EXISTS ledgerq_migrator;
CREATE ROLE IF NOT EXISTS ledgerq_producer;
CREATE ROLE IF NOT EXISTS ledgerq_service;
CREATE ROLE IF NOT EXISTS ledgerq_operator;
CREATE ROLE IF NOT EXISTS ledgerq_admin;
-- The worker's batched window names its transaction in INNODB_TRX, which
-- takes PROCESS, a server-wide right (it also lists every login's statements):
-- ledger/mysql/window.py. Without it windows still run, but a window abandoned
-- by a hung handler keeps its row locks until that handler returns.
GRANT PROCESS ON *.* TO ledgerq_service;

-- name: grant_database
-- Once per ledger database, by an account holding these privileges WITH GRANT
-- OPTION (root): the migrator creates, alters and drops ledgerq's tables in
-- it (and Alembic's version table). MySQL grants on a database name, not on
-- what a role owns: there is no owner whose objects the others are granted.
GRANT CREATE, ALTER, DROP, INDEX, REFERENCES, SELECT, INSERT, UPDATE, DELETE,
      CREATE ROUTINE, ALTER ROUTINE, EXECUTE
    ON ledgerq_database_name.* TO ledgerq_migrator;

-- name: grant_objects
-- After every `ledgerq migrate`, by an account with GRANT OPTION on the tables
-- (MySQL has no default privileges for tables created later).
--
-- Producer: insert_task (and MariaDB's one-statement batch, whose RETURNING id
-- MariaDB checks as an insert of id) insert these columns, plain inserts (an upsert would need UPDATE on every inserted column,
-- status included: MariaDB asks for it); a new task's shard is written from its
-- id; a unique task that met its key reads the holder's id; once=True takes the
-- permanent key, reads who holds it and records its task; result() reads where
-- a task stands. The locking reads of the holders are shared locks (LOCK IN
-- SHARE MODE): MariaDB asks for SELECT only; MySQL 8.0.22+ also asks for one of
-- UPDATE, DELETE or LOCK TABLES on the table, which the UPDATE grants below give.
GRANT INSERT (id, kind, queue, payload, business_key, dedupe_key, priority, shard, run_at,
              status, max_attempts, retry, timeout_s, parent_id, trace_context, ordering_key,
              expires_at, tags, created_at),
      UPDATE (shard),
      SELECT (id, kind, dedupe_key, status, result, last_error, attempts, max_attempts,
              created_at, started_at, finished_at)
    ON ledgerq_tasks TO ledgerq_producer;
GRANT SELECT (id, kind, status, result, last_error, attempts, max_attempts, created_at,
              started_at, finished_at)
    ON ledgerq_history TO ledgerq_producer;
GRANT INSERT (kind, business_key, task_id, created_at),
      UPDATE (task_id),
      SELECT (kind, business_key, task_id)
    ON ledgerq_unique_keys TO ledgerq_producer;
-- after=: the producer locks the named tasks (SELECT id, status above),
-- inserts its tasks' edges, and the migrator's procedure (m0007, run as its
-- definer) sets them waiting or judges them at once: no UPDATE or DELETE of a
-- task, no write to history, for the producer itself.
GRANT INSERT (task_id, depends_on, always) ON ledgerq_dependencies TO ledgerq_producer;
GRANT EXECUTE ON PROCEDURE ledgerq_after_add TO ledgerq_producer;
-- An after= naming a task found nowhere: is it another ledger shard's?
GRANT SELECT ON ledgerq_ledger_shard TO ledgerq_producer;
-- parent_id: a child's insert creates its family's row (or meets it) and reads
-- whether the family has completed.
GRANT INSERT (parent_id, created_at), SELECT (parent_id, completed_at)
    ON ledgerq_families TO ledgerq_producer;
--
-- Service (relay, workers, reconciler): reads and writes the task tables,
-- registrations and liveness. Retention drops and adds history's day
-- partitions (ALTER, DROP on ledgerq_history): DDL that MySQL grants per
-- table, where PostgreSQL's service runs it through a SECURITY DEFINER
-- function of the migrator's and holds no such right itself.
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_tasks TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE, ALTER, DROP ON ledgerq_history TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_unique_keys TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_kinds TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_subscriptions TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_workers TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE ON ledgerq_audit TO ledgerq_service;
GRANT SELECT, INSERT ON ledgerq_audit_tasks TO ledgerq_service;
GRANT SELECT ON ledgerq_pauses TO ledgerq_service;
GRANT SELECT ON ledgerq_key_releases TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_dependencies TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE ON ledgerq_families TO ledgerq_service;
GRANT SELECT ON ledgerq_alembic_version TO ledgerq_service;
-- The start check reads which ledger shard the database is (migration m0008).
GRANT SELECT ON ledgerq_ledger_shard TO ledgerq_service;
-- The dashboard's rollup (migration m0012), counted by the reconciler's pass
-- from history (ledger/mysql/rollup.sql) and pruned after its keep.
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_rollup_counts TO ledgerq_service;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_rollup_latency TO ledgerq_service;
GRANT SELECT, UPDATE ON ledgerq_rollup_state TO ledgerq_service;
--
-- Operator: reads everything ledgerq keeps, changes nothing.
GRANT SELECT ON ledgerq_tasks TO ledgerq_operator;
GRANT SELECT ON ledgerq_history TO ledgerq_operator;
GRANT SELECT ON ledgerq_unique_keys TO ledgerq_operator;
GRANT SELECT ON ledgerq_kinds TO ledgerq_operator;
GRANT SELECT ON ledgerq_subscriptions TO ledgerq_operator;
GRANT SELECT ON ledgerq_workers TO ledgerq_operator;
GRANT SELECT ON ledgerq_audit TO ledgerq_operator;
GRANT SELECT ON ledgerq_audit_tasks TO ledgerq_operator;
GRANT SELECT ON ledgerq_pauses TO ledgerq_operator;
GRANT SELECT ON ledgerq_key_releases TO ledgerq_operator;
GRANT SELECT ON ledgerq_dependencies TO ledgerq_operator;
GRANT SELECT ON ledgerq_families TO ledgerq_operator;
GRANT SELECT ON ledgerq_alembic_version TO ledgerq_operator;
GRANT SELECT ON ledgerq_ledger_shard TO ledgerq_operator;
GRANT SELECT ON ledgerq_rollup_counts TO ledgerq_operator;
GRANT SELECT ON ledgerq_rollup_latency TO ledgerq_operator;
GRANT SELECT ON ledgerq_rollup_state TO ledgerq_operator;
--
-- Admin: the operator's reads (its role granted to it), and the operator's
-- actions: fenced changes to live tasks, a retry from history, and their audit.
GRANT ledgerq_operator TO ledgerq_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_tasks TO ledgerq_admin;
GRANT SELECT, INSERT, DELETE ON ledgerq_history TO ledgerq_admin;
GRANT SELECT, UPDATE, DELETE ON ledgerq_unique_keys TO ledgerq_admin;
GRANT SELECT, INSERT, UPDATE ON ledgerq_audit TO ledgerq_admin;
GRANT SELECT, INSERT ON ledgerq_audit_tasks TO ledgerq_admin;
GRANT SELECT, INSERT, UPDATE, DELETE ON ledgerq_pauses TO ledgerq_admin;
-- `ledgerq kinds limit`: a kind's rate limit, upserted (ledger/mysql/metering.sql).
GRANT SELECT, INSERT, UPDATE ON ledgerq_kinds TO ledgerq_admin;
-- `ledgerq tasks release-key`: a death released (ledger/mysql/keys.sql).
GRANT SELECT, INSERT ON ledgerq_key_releases TO ledgerq_admin;
GRANT SELECT, UPDATE ON ledgerq_dependencies TO ledgerq_admin;
GRANT SELECT, UPDATE ON ledgerq_families TO ledgerq_admin;
