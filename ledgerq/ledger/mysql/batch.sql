-- The MySQL ledger's batched producer insert (ledger/mysql/batch.py loads it as
-- MyBatchQueries): enqueue_many's common case, one statement for many tasks
-- where the single insert (queries.sql insert_task) takes one per task.

-- name: server_batch_ids
-- How the server can give a batch's ids back (enqueue_many asks once per call):
-- consecutive, when innodb_autoinc_lock_mode is 0 or 1 (MariaDB's default, 1:
-- an INSERT ... SELECT holds the table's AUTO-INC lock to its end, so its rows
-- take consecutive ids, :step apart, the first one the driver's lastrowid);
-- else through INSERT ... RETURNING, which MariaDB (10.5+) answers and MySQL
-- does not (there, with the interleaved mode 2, MySQL 8's default, one insert
-- per task).
SELECT VERSION() LIKE '%MariaDB%' AS returns_inserts,
       @@innodb_autoinc_lock_mode IN (0, 1) AS consecutive,
       @@auto_increment_increment AS step

-- name: insert_task_rows
-- The tasks of :rows, a JSON array of one object per task (insert_task's
-- parameters by name, a None left out; payload, retry, trace_context and tags
-- as their JSON text in a string), inserted by one statement in the array's
-- order (ORDER BY the ordinality: the rows take their AUTO_INCREMENT ids in that
-- order, which InnoDB keeps increasing within a statement in every
-- innodb_autoinc_lock_mode, however it interleaves concurrent statements). The
-- ids: consecutive from the driver's lastrowid where the lock mode makes them
-- so (server_batch_ids), else this statement with RETURNING id appended
-- (batch.py's INSERT_RETURNING; the caller sorts them, so it needs no promise
-- on the order RETURNING answers in). Not RETURNING always: MariaDB asks a
-- RETURNING insert for SELECT on every column it inserts, a right the
-- producer's role otherwise does without (docs/security.md). Only tasks without a
-- de-duplication key (no unique=True, no once=True): nothing can meet a
-- duplicate here, so there is no ON DUPLICATE KEY clause and no row lock on
-- another task. shard: the given one, else 0; with several shards and none
-- given the caller sets it from the new ids afterwards (shard_task_rows).
-- Text is read as LONGTEXT (JSON_TABLE truncates a value too long for its
-- column with a warning only): a value too long for the table's column fails
-- the insert as it fails the single insert (in a strict sql_mode, the servers'
-- default), and is cut as there otherwise.
-- transitions: -> pending
INSERT INTO ledgerq_tasks (kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context, ordering_key, expires_at, tags, created_at)
SELECT r.kind, r.queue, r.payload, r.business_key, NULL, r.priority, COALESCE(r.shard, 0),
       COALESCE(r.run_at, UTC_TIMESTAMP(6) + INTERVAL r.delay_us MICROSECOND), 'pending',
       r.max_attempts, r.retry, r.timeout_s, r.parent_id, r.trace_context, r.ordering_key,
       COALESCE(r.expires_at, UTC_TIMESTAMP(6) + INTERVAL r.expires_us MICROSECOND), r.tags,
       UTC_TIMESTAMP(6)
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (
         ord           FOR ORDINALITY,
         kind          LONGTEXT     PATH '$.kind',
         queue         LONGTEXT     PATH '$.queue',
         payload       LONGTEXT     PATH '$.payload',
         business_key  LONGTEXT     PATH '$.business_key',
         priority      SMALLINT     PATH '$.priority',
         shard         SMALLINT     PATH '$.shard',
         run_at        DATETIME(6)  PATH '$.run_at',
         delay_us      BIGINT       PATH '$.delay_us',
         max_attempts  INT          PATH '$.max_attempts',
         retry         LONGTEXT     PATH '$.retry',
         timeout_s     DOUBLE       PATH '$.timeout_s',
         parent_id     BIGINT       PATH '$.parent_id',
         trace_context LONGTEXT     PATH '$.trace_context',
         ordering_key  LONGTEXT     PATH '$.ordering_key',
         expires_at    DATETIME(6)  PATH '$.expires_at',
         expires_us    BIGINT       PATH '$.expires_us',
         tags          LONGTEXT     PATH '$.tags')) AS r
ORDER BY r.ord

-- name: shard_task_rows
-- New tasks' shards from their ids (id modulo LEDGERQ_SHARDS): queries.sql
-- shard_task for a batch.
UPDATE ledgerq_tasks SET shard = id % :shards WHERE id IN :ids
