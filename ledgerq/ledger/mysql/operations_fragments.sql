-- The operator's shared rules on the MySQL ledger (ledger/mysql/operations.sql
-- includes them, beside ledger/mysql/fragments.sql's), PostgreSQL's
-- fragments.sql listed_columns, history_branch and task_filter in MySQL's SQL.

-- fragment: listed_columns
-- The columns of a task-list row (ledger/actions.py LIST_COLUMNS), of the
-- branch's table under the alias x.
x.id, x.kind, x.queue, x.status, x.attempts, x.max_attempts, x.business_key, x.run_at,
x.created_at, x.finished_at, x.last_error, x.priority, x.epoch, x.result, x.progress,
x.expires_at, x.expired, x.tags

-- fragment: history_branch(status)
-- One history status's branch of list_tasks, the status a constant (a literal,
-- 'dead'): the branch reads the (status, id) prefix of that status only, stops
-- after :limit rows, and when the status is not among :statuses it is a
-- constant false the optimizer skips the branch on.
(SELECT {{listed_columns}}, 'history' AS location
 FROM ledgerq_history x
 WHERE {{status}} IN :statuses AND x.status = {{status}}
   AND {{task_filter}}
 ORDER BY x.id DESC
 LIMIT :limit)

-- fragment: task_filter
-- The operator's task filter (ledger/filters.py TaskFilter.params, adapted by
-- ledger/mysql/operations.py list_params), on the row x of either table: ids
-- below :before (keyset paging), then each criterion, NULL when unset. Every
-- value is a bound parameter; none is spliced into the text. The error
-- criterion is a case-insensitive substring (LOCATE: no LIKE pattern, so a %
-- or _ in the text is matched as written). The ids criterion is an IN list
-- (:every_id true when the filter names none). The tags criterion: every tag
-- given (:tags, a JSON array) is in the row's tags.
x.id < :before
AND (:kind IS NULL OR x.kind = :kind)
AND (:queue IS NULL OR x.queue = :queue)
AND (:business_key IS NULL OR x.business_key = :business_key)
AND (:since IS NULL OR x.created_at >= :since)
AND (:until IS NULL OR x.created_at < :until)
AND (:error IS NULL
     OR (x.last_error IS NOT NULL AND LOCATE(LOWER(:error), LOWER(x.last_error)) > 0))
AND (:every_id OR x.id IN :ids)
AND (:tags IS NULL OR JSON_CONTAINS(x.tags, :tags))

-- fragment: fenced
-- The compare-and-set's fence on the row t: one of the batch's ids (:ids, by
-- primary key), still at the epoch the operator's listing read (:batch's field
-- epoch). Each statement adds the statuses it expects.
t.id IN :ids AND t.epoch = CAST({{field(epoch)}} AS SIGNED)
