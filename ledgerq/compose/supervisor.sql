-- The supervisor's statements (ledgerq worker --processes; ledgerq/compose/supervisor.py).
-- See ledger/sql.py for the format.

-- name: running_of_process
-- The running rows of the worker process :prefix names (its worker ids begin
-- host:pid:), read once it has died. lease_until IS NOT NULL: the lease index
-- (every running row has a lease).
SELECT id, epoch, attempts, retry
FROM ledgerq_tasks
WHERE status = 'running' AND lease_until IS NOT NULL AND starts_with(worker, :prefix)
ORDER BY id
