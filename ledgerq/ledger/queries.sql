-- Every statement the ledger runs, by name. ledger/sql.py loads them as
-- SQLAlchemy text() clauses; no SQL is built at run time.
--
-- Conventions: batch statements take parallel arrays (:ids, :epochs, ...) and
-- unnest them, so a batch is one round trip. Every state change is a
-- compare-and-set on (id, epoch, expected status) and RETURNs the rows it won:
-- a row missing from the result means another actor got there first.
--
-- Every statement that changes a task's status says so in a
-- "-- transitions: from -> to, ..." line; tests/unit/test_transitions.py derives
-- the transitions from the SQL itself and checks both against ledger/states.py.
-- The columns of a history row are listed once, in finish.

-- name: insert_task
-- The id is taken first so that a task with neither shard nor shard_key gets
-- its shard from it (id modulo :shards, LEDGERQ_SHARDS; ledger/sharding.py).
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context, ordering_key, expires_at, tags)
SELECT n.id, :kind, :queue, CAST(:payload AS jsonb), :business_key, :dedupe_key, :priority,
       COALESCE(CAST(:shard AS integer), n.id % CAST(:shards AS integer)),
       COALESCE(CAST(:run_at AS timestamptz), now() + make_interval(secs => :delay_s)),
       'pending', :max_attempts,
       CAST(:retry AS jsonb), :timeout_s, :parent_id, CAST(:trace_context AS jsonb),
       :ordering_key,
       COALESCE(CAST(:expires_at AS timestamptz), now() + make_interval(secs => :expires_s)),
       CAST(:tags AS text[])
FROM (SELECT nextval('ledgerq_task_id_seq') AS id) n
ON CONFLICT (kind, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: insert_tasks
-- Ids are taken in input order first (as insert_tasks_once does), for the
-- shard of a row with neither shard nor shard_key (id modulo its shards).
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           trace_context, ordering_key, expires_at, tags)
SELECT r.new_id, r.kind, r.queue, r.payload, r.business_key, r.dedupe_key, r.priority,
       COALESCE(r.shard, r.new_id % r.shards),
       COALESCE(r.run_at, now() + make_interval(secs => r.delay_s)), 'pending', r.max_attempts,
       r.retry, r.timeout_s, r.parent_id, r.trace_context, r.ordering_key,
       COALESCE(r.expires_at, now() + make_interval(secs => r.expires_s)), r.tags
FROM (
    SELECT r.*, nextval('ledgerq_task_id_seq') AS new_id
    FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
             AS (kind text, queue text, payload jsonb, business_key text, dedupe_key text,
                 priority smallint, shard smallint, shards integer, run_at timestamptz,
                 delay_s float8, max_attempts integer,
                 retry jsonb, timeout_s double precision, parent_id bigint,
                 trace_context jsonb, ordering_key text, expires_at timestamptz,
                 expires_s float8, tags text[])) WITH ORDINALITY
         AS r(kind, queue, payload, business_key, dedupe_key, priority, shard, shards, run_at,
              delay_s, max_attempts, retry, timeout_s, parent_id, trace_context, ordering_key,
              expires_at, expires_s, tags, n)
    ORDER BY r.n
) r
ORDER BY r.n
ON CONFLICT (kind, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: live_id_by_dedupe_key
SELECT id FROM ledgerq_tasks WHERE kind = :kind AND dedupe_key = :dedupe_key

-- name: insert_task_once
-- A task under a permanent key (once=True): the key is taken first, with the
-- new task's id, in the producer's transaction. A key already held, even by a
-- task that finished long ago or was purged, inserts nothing; a producer racing
-- on the same key waits on the primary key until the other one commits (then
-- inserts nothing) or rolls back (then inserts).
WITH claimed AS (
    INSERT INTO ledgerq_unique_keys (kind, key, task_id)
    VALUES (:kind, :business_key, nextval('ledgerq_task_id_seq'))
    ON CONFLICT (kind, key) DO NOTHING
    RETURNING task_id
)
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           ordering_key, expires_at, tags)
SELECT claimed.task_id, :kind, :queue, CAST(:payload AS jsonb), :business_key, NULL, :priority,
       COALESCE(CAST(:shard AS integer), claimed.task_id % CAST(:shards AS integer)), COALESCE(CAST(:run_at AS timestamptz), now() + make_interval(secs => :delay_s)),
       'pending', :max_attempts, CAST(:retry AS jsonb), :timeout_s, :parent_id, :ordering_key,
       COALESCE(CAST(:expires_at AS timestamptz), now() + make_interval(secs => :expires_s)),
       CAST(:tags AS text[])
FROM claimed
RETURNING id

-- name: insert_tasks_once
-- insert_tasks for a batch holding once=True rows: each row gets its id first,
-- the permanent keys are taken with those ids, and a once row whose key was
-- already held (or taken by an earlier row of the batch) is left out.
WITH r AS (
    SELECT r.*, nextval('ledgerq_task_id_seq') AS new_id
    FROM ROWS FROM (jsonb_to_recordset(CAST(:rows AS jsonb))
             AS (kind text, queue text, payload jsonb, business_key text, dedupe_key text,
                 priority smallint, shard smallint, shards integer, run_at timestamptz,
                 delay_s float8, max_attempts integer, retry jsonb, timeout_s double precision,
                 parent_id bigint, once boolean, ordering_key text, expires_at timestamptz,
                 expires_s float8, tags text[])) WITH ORDINALITY
         AS r(kind, queue, payload, business_key, dedupe_key, priority, shard, shards, run_at,
              delay_s, max_attempts, retry, timeout_s, parent_id, once, ordering_key,
              expires_at, expires_s, tags, n)
    ORDER BY r.n
), claimed AS (
    INSERT INTO ledgerq_unique_keys (kind, key, task_id)
    SELECT kind, business_key, new_id FROM r WHERE once ORDER BY n
    ON CONFLICT (kind, key) DO NOTHING
    RETURNING task_id
)
INSERT INTO ledgerq_tasks (id, kind, queue, payload, business_key, dedupe_key, priority, shard,
                           run_at, status, max_attempts, retry, timeout_s, parent_id,
                           ordering_key, expires_at, tags)
SELECT r.new_id, r.kind, r.queue, r.payload, r.business_key, r.dedupe_key, r.priority,
       COALESCE(r.shard, r.new_id % r.shards), COALESCE(r.run_at, now() + make_interval(secs => r.delay_s)), 'pending', r.max_attempts,
       r.retry, r.timeout_s, r.parent_id, r.ordering_key,
       COALESCE(r.expires_at, now() + make_interval(secs => r.expires_s)), r.tags
FROM r
WHERE NOT r.once OR r.new_id IN (SELECT task_id FROM claimed)
ORDER BY r.n
ON CONFLICT (kind, dedupe_key) WHERE dedupe_key IS NOT NULL DO NOTHING
RETURNING id

-- name: once_task_id
-- The task that holds a permanent key (it may have finished, or been purged).
SELECT task_id FROM ledgerq_unique_keys WHERE kind = :kind AND key = :business_key

-- name: select_due
-- The relay's claim: the due tasks each broker route's window has room for,
-- picked by ledgerq_pick (migration 0014, the one rule the direct path's
-- claim_due shares), locked until the confirmed rows are marked published.
-- ledgerq_windows has one row per live broker route and its credit (the live
-- subscribers' capacity minus the route's published rows); a route with no
-- live subscriber has none, so nothing is published for it and its work waits
-- here, in the ledger, where priorities, aging, pauses, rate limits and
-- operators still reach it. SKIP LOCKED: relays never wait for or collide with
-- each other. route: the window's route ('' for the queue's own broker queue).
-- trace_context: the producer's trace, which the publish span continues.
SELECT id, kind, queue, priority, epoch, suspect, trace_context, route, subscribers
FROM ledgerq_pick((SELECT COALESCE(jsonb_agg(w), '[]'::jsonb) FROM ledgerq_windows w),
                  :limit, :aging_s)

-- name: publish_due
-- The relay's pass as one statement, committed by itself (autocommit):
-- select_due's pick, marked published with mark_published's compare-and-set,
-- the picked rows returned in the pick's order. One round trip instead of four
-- (BEGIN and the pick, the mark, COMMIT), and no lock held while the broker
-- works. A row the pick took but the mark did not move is not returned (it
-- cannot happen while the pick's lock holds: a row the pick saw in a newer
-- snapshot than the statement's own is skipped by the UPDATE, and waits for the
-- next pass). route: '' for the queue's own broker queue.
-- transitions: pending -> published, published -> published
WITH picked AS MATERIALIZED (
    SELECT *
    FROM ledgerq_pick((SELECT COALESCE(jsonb_agg(w), '[]'::jsonb) FROM ledgerq_windows w),
                      :limit, :aging_s) WITH ORDINALITY
         AS p(id, kind, queue, priority, epoch, suspect, trace_context, route, subscribers, n)
), marked AS (
    UPDATE ledgerq_tasks t
    SET status = 'published', published_at = clock_timestamp(), publishes = t.publishes + 1,
        route = COALESCE(p.route, '')
    FROM picked p
    WHERE t.id = p.id AND t.epoch = p.epoch AND t.status IN ('pending', 'published')
    RETURNING t.id
)
SELECT id, kind, queue, priority, epoch, suspect, trace_context, route, subscribers
FROM picked
WHERE id IN (SELECT id FROM marked)
ORDER BY n

-- name: kind_durations
-- How long each kind's attempts run, for the relay's envelopes (a long kind's
-- tasks travel one per message): the mean run time of its attempts that ended
-- in the last five minutes (at most the newest 5,000), and, for a kind with an
-- attempt running now, at least the oldest such attempt's age.
WITH recent AS (
    SELECT kind, EXTRACT(EPOCH FROM finished_at - started_at) AS s
    FROM ledgerq_history
    WHERE finished_at > now() - interval '5 minutes' AND started_at IS NOT NULL
    ORDER BY finished_at DESC
    LIMIT 5000
), running AS (
    SELECT kind, max(EXTRACT(EPOCH FROM now() - started_at)) AS s
    FROM ledgerq_tasks
    WHERE status = 'running' AND lease_until IS NOT NULL
    GROUP BY kind
)
SELECT kind, CAST(max(s) AS float8) AS seconds
FROM (SELECT kind, avg(s) AS s FROM recent GROUP BY kind
      UNION ALL SELECT kind, s FROM running) AS k
GROUP BY kind

-- name: register_limits
-- The rate limits of a worker's @task(rate_limit=...) kinds, at its start. A
-- new kind's bucket starts full; a changed limit refills it; an unchanged one
-- keeps its tokens (workers restarting do not refill it) and is not written.
INSERT INTO ledgerq_kinds AS k (kind, rate_per_s, burst, tokens)
SELECT r.kind, r.rate, r.burst, r.burst
FROM unnest(CAST(:kinds AS text[]), CAST(:rates AS float8[]), CAST(:bursts AS float8[]))
     AS r(kind, rate, burst)
ON CONFLICT (kind) DO UPDATE
SET rate_per_s = excluded.rate_per_s, burst = excluded.burst, tokens = excluded.burst,
    updated_at = now()
WHERE k.rate_per_s IS DISTINCT FROM excluded.rate_per_s
   OR k.burst IS DISTINCT FROM excluded.burst
RETURNING k.kind

-- name: register_ordering
-- A worker's kinds at its start and what a dead task of each does to its
-- ordering key: 'block' holds the key's later tasks until an operator acts,
-- 'release' (the default) lets them go. A 'block' kind gets a row; a 'release'
-- kind is written only if it has a row that says otherwise (fragments.sql
-- kind_setting).
{{kind_setting(ordering, :orderings, text, 'release')}}

-- name: register_sticky
-- A worker's kinds at its start and each one's @task(sticky_retry=...) window in
-- seconds (NULL: none): a retry of the kind is held for the worker that ran the
-- failed attempt that long (finish, migration 0018). A kind with a window gets
-- a row; one without is written only if its row says otherwise (fragments.sql
-- kind_setting).
{{kind_setting(sticky_s, :seconds, float8, NULL)}}

-- name: register_children_done
-- A worker's kinds at its start and the kind of the callback each enqueues when
-- a task of it and all its children are terminal (@task(on_children_done=...),
-- NULL: none). A kind with a callback gets a row; a kind without one is written
-- only if its row says otherwise (fragments.sql kind_setting). The history
-- trigger of migration 0010 reads it.
{{kind_setting(on_children_done, :callbacks, text, NULL)}}

-- name: register_defaults
-- A worker's kinds at its start and their defaults (@task(max_attempts=...,
-- retry=..., timeout=...), NULL: none), which the claim reads for what a
-- producer left unset (the trigger of migration 0019). Every kind of the worker is written:
-- the defaults of the latest worker to start stand (a deploy changes them).
-- Only a row that changes is written.
INSERT INTO ledgerq_kinds AS k (kind, max_attempts, retry, timeout_s)
SELECT r.kind, r.max_attempts, r.retry, r.timeout_s
FROM unnest(CAST(:kinds AS text[]), CAST(:max_attempts AS integer[]),
            CAST(:retries AS jsonb[]), CAST(:timeouts AS float8[]))
     AS r(kind, max_attempts, retry, timeout_s)
ON CONFLICT (kind) DO UPDATE
SET max_attempts = excluded.max_attempts, retry = excluded.retry,
    timeout_s = excluded.timeout_s, updated_at = now()
WHERE k.max_attempts IS DISTINCT FROM excluded.max_attempts
   OR k.retry IS DISTINCT FROM excluded.retry
   OR k.timeout_s IS DISTINCT FROM excluded.timeout_s
RETURNING k.kind

-- name: mark_published
-- By the relay before it publishes (the row is pending and locked since
-- select_due; the transaction commits, then the messages go out), or by the
-- reconciler after a confirmed publish (a stalled published row, or an overdue
-- pending one): published_at restarts the stall clock; route is where it went
-- (its window's outstanding count). published_at is the wall clock
-- (clock_timestamp()), not the transaction's start.
-- transitions: pending -> published, published -> published
UPDATE ledgerq_tasks t
SET status = 'published', published_at = clock_timestamp(), publishes = t.publishes + 1,
    route = m.route
FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[]), CAST(:routes AS text[]))
     AS m(id, epoch, route)
WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
RETURNING t.id

-- name: return_unpublished
-- The relay committed these rows published, then their publish failed (nacked,
-- returned, unconfirmed, or the broker away): they go back to pending at once
-- (not after the stall window), their epoch bumped so a message that reached
-- the broker after all (an unconfirmed publish) claims nothing. Fenced: a row a
-- worker claimed meanwhile, or the reconciler moved, is left alone.
-- transitions: published -> pending
UPDATE ledgerq_tasks t
SET status = 'pending', epoch = t.epoch + 1, published_at = NULL, publishes = 0, route = NULL
{{fence}} AND t.status = 'published'
RETURNING t.id

-- name: claim
-- The consumer's claim. It accepts 'pending' as well as 'published': the
-- delivery can overtake the reconciler's commit (it publishes its overdue
-- rows before it marks them; the UPDATE then waits on its row lock and
-- re-checks), or a stale copy can meet a row returned to pending (its epoch no
-- longer matches). The relay commits its marks before it publishes.
-- The epoch in the message must match, so a stale message cannot claim a
-- later attempt (for instance one waiting out its retry backoff), and the row
-- must be due: a message forged for a task scheduled later (or a copy that
-- overtook a retry's backoff) claims nothing. The relay publishes only due rows
-- and both compare run_at with the database's clock, so a real message is
-- always due here. The payload comes back as the text PostgreSQL prints (the
-- worker decodes it), converted once; one larger than :max_payload_bytes is
-- not sent: the row is claimed, payload is NULL and payload_bytes says why,
-- and the worker ends the task dead without running it. waited_s is how long
-- the task waited, on the database's clock, from when it became due (its
-- enqueue, or its run_at if later: a scheduled task, a retry) to this claim
-- (the metric ledgerq_start_latency_seconds). started_at is the wall clock at
-- the claim (clock_timestamp(), taken after any wait for the relay's row lock,
-- never the transaction's start), as every attempt time the worker writes (see
-- finish). A claim that won rows frees room
-- in its route's window, so it wakes the relays (NOTIFY ledgerq_enqueued, sent
-- on commit; they poll as well).
-- Per-kind defaults: what the producer left unset (NULL max_attempts, retry,
-- timeout_s) is filled in at a task's first claim (attempts 0 -> 1) from the
-- kind's row in ledgerq_kinds (written by the workers at their start,
-- register_defaults), max_attempts else 5, by the BEFORE UPDATE trigger of
-- migration 0019 (so the service role needs no UPDATE on what a task is): the
-- RETURNING sees the filled row, and every later step reads concrete values.
-- Expiry: a fenced row whose expires_at has passed is not claimed: it ends
-- cancelled and expired (its message is then acked unrun, as for any row gone).
-- transitions: pending -> running, published -> running, pending -> cancelled, published -> cancelled
WITH m AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
), ended AS (
    DELETE FROM ledgerq_tasks t USING m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
      AND t.expires_at <= now()
    RETURNING t.*, {{expired_end}}
), {{expired_burial}}, claimed AS (
    UPDATE ledgerq_tasks t
    {{claim_set}}
    FROM m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
      AND t.run_at <= now() AND (t.expires_at IS NULL OR t.expires_at > now())
    RETURNING {{claimed_columns}}
), woke AS (
    SELECT pg_notify('ledgerq_enqueued', '') FROM (SELECT 1 FROM claimed LIMIT 1) AS one
)
SELECT {{claim_answer}}
FROM claimed LEFT JOIN woke ON true LEFT JOIN told ON true



-- name: whereabouts
-- Where the tasks named by deliveries that lost their claim are now.
SELECT id, status FROM ledgerq_tasks WHERE id = ANY(CAST(:ids AS bigint[]))
UNION ALL
SELECT id, status FROM ledgerq_history WHERE id = ANY(CAST(:ids AS bigint[]))



-- name: finish
-- How attempts ended, one verdict per row, fenced like every write after a
-- claim: 'succeeded', 'cancelled' and 'dead' move the row to history; 'retry'
-- sends it back to pending after its delay, or to history as dead once its
-- attempts are spent, or as cancelled when an operator asked it to stop
-- (cancel_requested_at: a cancelled task is never retried); 'release' (the
-- reconciler's, for a worker that died with several tasks in flight) sends it
-- back to pending at once, the attempt uncharged, as a suspect (or to history as
-- cancelled when an operator asked it to stop). A success or a death stands
-- even when a cancel was requested: the attempt record keeps the request's time
-- ("the cancel came too late"). Each ended attempt appends one record to
-- attempt_log; :results is the handler's JSON return value (text). The end of
-- an attempt (finished_at, the record's ended_at, and the retry's delay from)
-- is the wall clock when this statement runs (m.at, clock_timestamp()), not the
-- transaction's start: run in a handler's own transaction (succeed_within) it
-- comes after the handler's work, however early its first write began that
-- transaction. A retry of a kind with @task(sticky_retry=s)
-- (ledgerq_kinds.sticky_s, migration 0018) is held for the attempt's worker
-- (sticky_worker) until s seconds after it is due (sticky_until; the view
-- ledgerq_ready reads both); any other retry, and a release, for nobody.
-- The ended ids wake result() waiters (NOTIFY ledgerq_ended, one per statement:
-- fragments.sql tell_ended).
-- transitions: running -> succeeded, running -> cancelled, running -> dead, running -> pending
WITH m AS (
    SELECT u.*, clock_timestamp() AS at
    FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[]),
                CAST(:verdicts AS text[]), CAST(:delays AS float8[]),
                CAST(:errors AS text[]), CAST(:results AS text[]))
         AS u(id, epoch, verdict, delay, error, result)
), ended AS (
    DELETE FROM ledgerq_tasks t USING m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
      AND (m.verdict IN ('succeeded', 'dead', 'cancelled')
           OR (m.verdict = 'retry' AND t.attempts >= t.max_attempts)
           OR (m.verdict IN ('retry', 'release') AND t.cancel_requested_at IS NOT NULL))
    RETURNING t.*,
              CASE WHEN m.verdict = 'succeeded' THEN 'succeeded'
                   WHEN m.verdict = 'cancelled' THEN 'cancelled'
                   WHEN m.verdict IN ('retry', 'release') AND t.cancel_requested_at IS NOT NULL
                       THEN 'cancelled'
                   ELSE 'dead' END AS ended_as,
              m.at AS ended_at, t.worker AS ended_worker,
              COALESCE(m.error, t.last_error) AS ended_error,
              CAST(m.result AS jsonb) AS ended_result,
              true AS ended_attempt, m.error AS ended_attempt_error,
              t.cancel_requested_at AS ended_cancel, false AS ended_expired
), buried AS (
    -- the history row (fragments.sql), the attempt's record appended to its log
    {{bury}}
    RETURNING id, kind, attempts, status, last_error
), told AS (
    -- the ended ids to result() waiters, sent on commit (fragments.sql)
    {{tell_ended}}
), woke AS (
    -- a keyed task ended while the next task of its key waits: the key is free on
    -- commit, so wake the relays and direct workers now (NOTIFY ledgerq_enqueued,
    -- as an enqueue does), not at their next poll, a second later. Nothing when
    -- no such task ended: PostgreSQL serialises the commits of transactions that
    -- notify, which other finishes must not pay.
    SELECT pg_notify('ledgerq_enqueued', '')
    WHERE EXISTS (SELECT 1 FROM ended e
                  JOIN ledgerq_tasks n ON n.ordering_key = e.ordering_key
                  WHERE e.ordering_key IS NOT NULL AND n.status = 'pending' AND n.id <> e.id)
), retried AS (
    UPDATE ledgerq_tasks t
    SET status = 'pending', run_at = m.at + make_interval(secs => m.delay),
        last_error = m.error, lease_until = NULL, worker = NULL,
        attempts = CASE WHEN m.verdict = 'release' THEN GREATEST(t.attempts - 1, 0)
                        ELSE t.attempts END,
        suspect = t.suspect OR m.verdict = 'release',
        sticky_worker = CASE WHEN m.verdict = 'retry' AND EXISTS (
            SELECT 1 FROM ledgerq_kinds k WHERE k.kind = t.kind AND k.sticky_s IS NOT NULL)
            THEN t.worker END,
        sticky_until = CASE WHEN m.verdict = 'retry' THEN m.at + make_interval(
            secs => m.delay + (SELECT k.sticky_s FROM ledgerq_kinds k WHERE k.kind = t.kind)) END,
        attempt_log = COALESCE(t.attempt_log, '[]'::jsonb) || jsonb_build_array(
            jsonb_build_object('attempt', t.attempts, 'worker', t.worker,
                               'started_at', t.started_at, 'ended_at', m.at,
                               'error', m.error,
                               'outcome', CASE WHEN m.verdict = 'release' THEN 'released'
                                               ELSE 'retry' END))
    FROM m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
      AND ((m.verdict = 'retry' AND t.attempts < t.max_attempts) OR m.verdict = 'release')
      AND t.cancel_requested_at IS NULL
    RETURNING t.id, t.kind, t.attempts, t.status, t.last_error
)
SELECT id, kind, attempts, status, last_error
FROM buried LEFT JOIN told ON true LEFT JOIN woke ON true
UNION ALL
SELECT id, kind, attempts, status, last_error FROM retried

-- name: lock_running
-- Locks the rows of these fences that are still running under them, for the
-- caller's transaction (the worker's batched commit, consumers/batch.py): until
-- it commits, no one else can move them, so the fenced finish it runs before its
-- COMMIT wins for every id returned. SKIP LOCKED: it never waits (a heartbeat,
-- a cancel or the reconciler holding a row would otherwise deadlock with it); a
-- row it did not return is busy or moved on, and its task takes the worker's
-- ordinary path, whose own fenced finish tells the two apart. Each row also
-- names the transaction holding the locks (its backend and start), so a window
-- abandoned by the worker can be ended from another connection (end_window).
-- LATERAL: one primary-key lookup per fence, whatever the statistics say (with
-- them stale, a join would hash every running row for each window).
SELECT t.id, pg_backend_pid() AS pid, now() AS began
FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[])) AS m(id, epoch)
CROSS JOIN LATERAL (
    SELECT t.id FROM ledgerq_tasks t
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
    FOR UPDATE SKIP LOCKED
) AS t

-- name: open_handlers
-- After a batched window's lock_running (consumers/window.py): one savepoint that
-- all its handlers' savepoints nest in. close_handlers releases them all at once,
-- before the window's finish, so the finish runs in the top transaction, the
-- one that locked the rows. (Run inside a subtransaction, each row's delete
-- must keep the top transaction's lock beside the subtransaction's delete, in
-- a MultiXact, which everyone reading those row versions must then resolve.)
SAVEPOINT ledgerq_handlers

-- name: close_handlers
-- And the worker's planner settings for the window's finish, to its COMMIT
-- (WORKER_PLANNER, ledger/pg/engines.py; the handlers ran with the defaults).
RELEASE SAVEPOINT ledgerq_handlers;
SELECT set_config('enable_hashjoin', 'off', true), set_config('enable_mergejoin', 'off', true),
       set_config('enable_bitmapscan', 'off', true)

-- name: mark_handler
-- Before each handler of a batched window: a savepoint its writes can be undone
-- to alone. One name for all of them: ROLLBACK TO names the latest, the running
-- handler's. These four are sent on the driver's connection, beside
-- SQLAlchemy's bookkeeping (one round trip, no statement compiled per task).
SAVEPOINT ledgerq_handler

-- name: undo_handler
-- A handler of a batched window failed: undo its writes, and only its.
ROLLBACK TO SAVEPOINT ledgerq_handler

-- name: end_window
-- Ends a batched window's transaction that the worker abandoned (a sync handler
-- outlived its timeout in it): terminating its backend rolls the window back and
-- releases its row locks at once, instead of at idle_in_transaction_session_timeout.
-- Only that transaction: the backend must still be in the transaction that began
-- at :began (a reused pid, or a later transaction, is left alone). A role may end
-- its own backends.
SELECT pg_terminate_backend(a.pid)
FROM pg_stat_activity a
WHERE a.pid = :pid AND a.xact_start = :began

-- name: heartbeat
-- Extends the leases still held, writes the progress reported since the last
-- beat (NULL: none, the stored one stays), and says which of those tasks an
-- operator asked to stop (ctx.cancel_requested). SKIP LOCKED: a row another
-- transaction holds (the worker's own batched window, which keeps its rows
-- locked until its COMMIT; a finish; a reconciler's page) is not waited for,
-- so one long window never holds up the beat of every other task. Such a row
-- comes back as busy (its fence held in the last committed version, its lease
-- not extended this time), not lost: the worker beats again soon. While it is
-- locked nobody else can move it (every other writer waits or skips it too).
WITH m AS (
    SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:epochs AS bigint[]),
                         CAST(:progress AS text[])) AS m(id, epoch, progress)
), held AS (
    SELECT t.id, m.progress
    FROM m CROSS JOIN LATERAL (
        SELECT t.id FROM ledgerq_tasks t
        WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running'
        FOR UPDATE SKIP LOCKED
    ) AS t
), beat AS (
    UPDATE ledgerq_tasks t
    SET heartbeat_at = now(), lease_until = clock_timestamp() + make_interval(secs => :lease_s),
        progress = COALESCE(CAST(h.progress AS jsonb), t.progress)
    FROM held h
    WHERE t.id = h.id
    RETURNING t.id, t.cancel_requested_at IS NOT NULL AS cancel_requested
)
SELECT id, cancel_requested, false AS busy FROM beat
UNION ALL
SELECT m.id, false, true FROM m
WHERE NOT EXISTS (SELECT 1 FROM held h WHERE h.id = m.id)
  AND EXISTS (SELECT 1 FROM ledgerq_tasks t
              WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'running')

-- name: save_checkpoint
UPDATE ledgerq_tasks
SET checkpoint = CAST(:checkpoint AS jsonb), heartbeat_at = now()
WHERE id = :id AND epoch = :epoch AND status = 'running'
RETURNING id




-- name: try_reconciler_lock
-- Session-level advisory lock: one reconciler acts at a time.
SELECT pg_try_advisory_lock(hashtext('ledgerq.reconciler'))

-- name: release_reconciler_lock
SELECT pg_advisory_unlock(hashtext('ledgerq.reconciler'))

-- name: select_stalled
-- Published but unclaimed for longer than the row's queue's stall window, which
-- doubles with each publication since the last claim (up to 64x), so a queue
-- with a deep backlog or no consumer is not flooded with copies. Only rows whose
-- route a live subscriber still serves: it is published there again (a row
-- whose route lost its subscribers goes back to pending instead,
-- unpublish_unserved). Keyset pagination by id so a huge ledger is read a page
-- at a time; the plain :min_stall_s bound lets the partial index on
-- published_at narrow the scan.
SELECT t.id, t.kind, t.queue, t.priority, t.epoch, t.suspect, COALESCE(t.route, '') AS route
FROM ledgerq_tasks t
LEFT JOIN unnest(CAST(:queues AS text[]), CAST(:stalls AS float8[])) AS w(queue, stall_s)
       ON w.queue = t.queue
WHERE t.status = 'published' AND t.id > :after
  AND t.published_at < now() - make_interval(secs => :min_stall_s)
  AND t.published_at < now() - make_interval(
        secs => COALESCE(w.stall_s, :default_stall_s) * power(2, LEAST(GREATEST(t.publishes - 1, 0), 6)))
  AND EXISTS (SELECT 1 FROM ledgerq_windows v
              WHERE v.queue = t.queue AND v.route = COALESCE(t.route, ''))
ORDER BY t.id
LIMIT :limit
FOR UPDATE OF t SKIP LOCKED

-- name: select_overdue
-- Pending rows due for longer than the default stall window that a live
-- route's window has room for: the relay should have published them; the
-- reconciler stands in for a relay that is down. The relay's rule exactly
-- (ledgerq_pick), only for rows due :default_stall_s or longer; each call picks
-- anew (the window shrinks as the rows are marked).
SELECT id, kind, queue, priority, epoch, suspect, trace_context, route, subscribers
FROM ledgerq_pick((SELECT COALESCE(jsonb_agg(w), '[]'::jsonb) FROM ledgerq_windows w),
                  :limit, :aging_s, :default_stall_s)

-- name: unpublish_unserved
-- Published rows whose route no live subscriber serves any more (its workers
-- stopped, or died and their subscriptions lapsed within one lease; or the
-- queue is now served --direct) go back to pending, their epoch bumped so the
-- messages stranded in that broker queue claim nothing; the relay then gives
-- them to any live window that covers them. Fenced like every write: a row a
-- worker claims meanwhile has moved on and is left alone.
-- The page is a materialized CTE, locked and limited once: a LIMIT in a
-- sub-query of UPDATE ... FROM may be evaluated again if the planner puts it on
-- the inner side of a join, and so move more than :limit rows.
-- transitions: published -> pending
WITH m AS MATERIALIZED (
    SELECT p.id, p.epoch FROM ledgerq_tasks p
    WHERE p.status = 'published'
      AND NOT EXISTS (SELECT 1 FROM ledgerq_windows v
                      WHERE v.queue = p.queue AND v.route = COALESCE(p.route, ''))
    ORDER BY p.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
)
UPDATE ledgerq_tasks t
SET status = 'pending', epoch = t.epoch + 1, published_at = NULL, publishes = 0, route = NULL
FROM m
WHERE t.id = m.id AND t.epoch = m.epoch AND t.status = 'published'
RETURNING t.id, t.kind, t.queue

-- name: expire_due
-- The expiry service (relay/expiry.py): pending or published rows whose
-- expires_at has passed, a page at a time (the partial index on expires_at),
-- end cancelled and expired, each audited. Fenced: a row a worker claims
-- meanwhile has moved on (its claim refused it if it was expired) and is left
-- alone; a row a relay holds is skipped (SKIP LOCKED) and taken next page or
-- by its claim.
-- transitions: pending -> cancelled, published -> cancelled
WITH m AS (
    SELECT p.id, p.epoch FROM ledgerq_tasks p
    WHERE p.expires_at <= now() AND p.status IN ('pending', 'published')
    ORDER BY p.expires_at, p.id
    LIMIT :limit
    FOR UPDATE SKIP LOCKED
), ended AS (
    DELETE FROM ledgerq_tasks t USING m
    WHERE t.id = m.id AND t.epoch = m.epoch AND t.status IN ('pending', 'published')
    RETURNING t.*, {{expired_end}}
), {{expired_burial}}
SELECT id FROM buried LEFT JOIN told ON true

-- name: silent_workers
-- Workers every one of whose running rows has an expired lease, and how many
-- rows each left behind. The reconciler reads this once per pass, before it
-- pages through the expired rows, so a worker's count does not shrink as its
-- rows are finished page by page. A worker heartbeats all its tasks at once, so
-- their leases run out within about one heartbeat interval of each other; until
-- the last has, the worker is not judged (see select_expired's :settle_s).
SELECT worker, count(*) AS in_flight
FROM ledgerq_tasks
WHERE status = 'running' AND worker IS NOT NULL
GROUP BY worker
HAVING max(lease_until) < now()

-- name: dead_workers
-- Workers presumed dead (ledgerq_worker_dead, migration 0017: their liveness
-- beats stopped for their silence while other workers' went on) that still
-- have running rows, and how many each left. Their rows are rescued at once
-- (select_orphaned), without waiting for their leases.
SELECT worker, count(*) AS in_flight
FROM ledgerq_tasks
WHERE status = 'running' AND worker IS NOT NULL AND lease_until IS NOT NULL
GROUP BY worker
HAVING ledgerq_worker_dead(worker)

-- name: lapse_dead_subscriptions
-- The subscriptions of workers presumed dead expire now instead of a lease
-- later: the relay stops filling their windows, and unpublish_unserved takes
-- back what was published to a route that no live worker serves any more.
UPDATE ledgerq_subscriptions s SET expires_at = now()
WHERE s.expires_at > now() AND ledgerq_worker_dead(s.worker)
RETURNING s.worker

-- name: select_orphaned
-- The running rows of :workers (read by dead_workers at the start of the pass)
-- whose worker is still presumed dead, whatever their lease says: they are
-- finished like expired leases (finish, 'retry' or 'release'). A worker that
-- beat again since is left to its leases. lease_until IS NOT NULL: the lease
-- index (every running row has a lease).
SELECT id, epoch, kind, attempts, retry, worker
FROM ledgerq_tasks
WHERE status = 'running' AND lease_until IS NOT NULL AND id > :after
  AND worker = ANY(CAST(:workers AS text[])) AND ledgerq_worker_dead(worker)
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED

-- name: select_expired
-- Running rows whose lease ran out: their worker stopped heartbeating. A row is
-- taken when its worker is one of :workers (all of its leases ran out, read by
-- silent_workers at the start of the pass), or when its own lease ran out more
-- than :settle_s ago whatever its worker's other rows say, so a worker that
-- keeps heartbeating other tasks cannot hold an expired row forever. A row with
-- no worker recorded (written by hand) is judged alone.
SELECT id, epoch, kind, attempts, retry, worker
FROM ledgerq_tasks
WHERE status = 'running' AND lease_until < now() AND id > :after
  AND (worker IS NULL OR worker = ANY(CAST(:workers AS text[]))
       OR lease_until < now() - make_interval(secs => :settle_s))
ORDER BY id
LIMIT :limit
FOR UPDATE SKIP LOCKED

