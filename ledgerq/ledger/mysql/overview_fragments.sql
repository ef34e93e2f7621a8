-- The rules the dashboard's rollup (rollup.sql) and the overview's fresh tail
-- (overview.sql) share on the MySQL / MariaDB ledger, written once: what
-- PostgreSQL's migration 0008 writes as SQL functions (ledgerq_latency_bucket,
-- ledgerq_hops, ledgerq_error_line) and date_trunc. A minute or an hour
-- counted by the rollup is the one the tail would have put it in, so the two
-- add up. Spliced in by ledger/sql.py (ledger/mysql/rollup.py loads this file).

-- fragment: latency_bucket(seconds)
-- The log-scale bucket of a duration in seconds: 0 under 1 ms, b for
-- [1 ms * 2 ** ((b - 1) / 2), 1 ms * 2 ** (b / 2)), 47 from about 3.3 h up
-- (Python's ledgerq.ledger.rollup.bucket_of).
LEAST(47, GREATEST(0, FLOOR(2 * LOG2(GREATEST({{seconds}}, 0.0001) / 0.001)) + 1))

-- fragment: hops
-- The four hops a finished task's timestamps measure, one row each (hop).
(SELECT 'due_publish' AS hop UNION ALL SELECT 'publish_start'
 UNION ALL SELECT 'start_end' UNION ALL SELECT 'total')

-- fragment: hop_seconds(h, x)
-- How long history row h took on hop x.hop, in seconds (a double): due to
-- published (from the later of created_at and run_at), published to started,
-- started to finished, created to finished; NULL for a hop it never took.
CASE {{x}}.hop
    WHEN 'due_publish' THEN TIMESTAMPDIFF(MICROSECOND, GREATEST({{h}}.created_at, {{h}}.run_at),
                                          {{h}}.published_at)
    WHEN 'publish_start' THEN TIMESTAMPDIFF(MICROSECOND, {{h}}.published_at, {{h}}.started_at)
    WHEN 'start_end' THEN TIMESTAMPDIFF(MICROSECOND, {{h}}.started_at, {{h}}.finished_at)
    ELSE TIMESTAMPDIFF(MICROSECOND, {{h}}.created_at, {{h}}.finished_at)
END / 1e6

-- fragment: error_line(h)
-- What dead tasks are grouped by: the last line of history row h's last error,
-- spaces and newlines trimmed, cut to 200 characters; '' for the other statuses.
CASE WHEN {{h}}.status = 'dead'
     THEN LEFT(SUBSTRING_INDEX(REGEXP_REPLACE(COALESCE({{h}}.last_error, ''),
                                              '^[ \n]+|[ \n]+$', ''), '\n', -1), 200)
     ELSE '' END

-- fragment: minute_of(t)
-- The UTC minute of t (PostgreSQL's date_trunc('minute', t)).
TIMESTAMP(DATE({{t}}), MAKETIME(HOUR({{t}}), MINUTE({{t}}), 0))

-- fragment: hour_of(t)
-- The UTC hour of t (PostgreSQL's date_trunc('hour', t)).
TIMESTAMP(DATE({{t}}), MAKETIME(HOUR({{t}}), 0, 0))

-- fragment: bin_of(t)
-- The start of t's :step_s-second bin, bins starting at :since (PostgreSQL's
-- date_bin): the overview's throughput.
DATE_ADD(CAST(:since AS DATETIME(6)),
         INTERVAL FLOOR(TIMESTAMPDIFF(MICROSECOND, :since, {{t}}) / (:step_s * 1000000))
                  * :step_s SECOND)
