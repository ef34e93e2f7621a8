-- The MySQL ledger's audit records (ledger/mysql/audit.py), PostgreSQL's
-- insert_audit and record_audit_batch without RETURNING or unnest.

-- name: insert_audit
-- One action's record; its id is the driver's lastrowid.
INSERT INTO ledgerq_audit (at, actor, action, selection, options, reason)
VALUES (UTC_TIMESTAMP(6), :actor, :action, :selection, :options, :reason)

-- name: count_audit_batch
-- One batch's counts, in the batch's own transaction.
UPDATE ledgerq_audit
SET matched = matched + :matched, changed = changed + :changed,
    skipped = skipped + :skipped, finished_at = UTC_TIMESTAMP(6)
WHERE id = :audit_id

-- name: record_audit_tasks
-- What happened to each task the batch matched: :rows is a JSON array of
-- [task_id, outcome] pairs (MySQL has no unnest; JSON_TABLE stands in for it). A
-- task already recorded under this action keeps its first outcome (PostgreSQL's
-- ON CONFLICT DO NOTHING).
INSERT IGNORE INTO ledgerq_audit_tasks (audit_id, task_id, outcome)
SELECT :audit_id, r.task_id, r.outcome
FROM JSON_TABLE(:rows, '$[*]' COLUMNS (task_id BIGINT PATH '$[0]',
                                      outcome VARCHAR(255) PATH '$[1]')) AS r
