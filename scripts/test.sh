#!/usr/bin/env bash
# Set up (venv, services) and run every check: ruff, mypy --strict, the import
# contracts, then pytest (unit, integration, faults) against the real PostgreSQL
# and RabbitMQ. Extra arguments go to pytest (for example --long, or -k name).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_venv
ensure_bytecode
ensure_services
ensure_test_servers
cd "$ROOT"
say "ruff"
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
say "mypy --strict"
"$VENV/bin/mypy"
say "import contracts"
"$VENV/bin/lint-imports"

# With no arguments (or only --long), the fault suite runs beside the rest: it
# has a RabbitMQ node of its own and gets a database of its own here, so the two
# share nothing but the PostgreSQL server. Most of its time is spent waiting
# (leases expiring, processes restarting), so on two cores the whole run takes
# about as long as the longer half. Any other arguments run one pytest as given.
split=1
for arg in "$@"; do [ "$arg" = "--long" ] || split=0; done
if [ "$split" = 0 ]; then
    say "pytest"
    exec "$VENV/bin/pytest" "$@"
fi

test_db_url() {
    python3 - "$1" <<'PY'
import os, sys, urllib.parse
base = os.environ.get("LEDGERQ_TEST_DATABASE_URL") or os.environ["LEDGERQ_DATABASE_URL"]
u = urllib.parse.urlsplit(base)
name = os.environ.get("LEDGERQ_TEST_DATABASE_URL") and u.path.lstrip("/") or "ledgerq_test"
print(urllib.parse.urlunsplit(u._replace(path="/" + name + sys.argv[1])))
PY
}
# The integration tests that run many processes (benchmarks, fan-out over three
# workers, ledger shards, routing, the direct path, shard pools, the window's
# streams, Django's manage.py, the CLI's end-to-end cases, a browser against a
# live worker, the CLI's worker processes, rate limits over two relays, the
# MariaDB ledger's workers and races, Django on MariaDB) form a
# third group beside the rest, with a database of its own: they too spend most
# of their time waiting on their processes. The list is
# balanced by the durations pytest reports (--durations) so that the main group
# and this one end at about the same time.
slow=(tests/integration/test_bench.py tests/integration/test_fanout.py
      tests/integration/test_ledger_shards.py tests/integration/test_routing.py
      tests/integration/test_direct.py tests/integration/test_auto_shards.py
      tests/integration/test_window.py tests/integration/test_django.py
      tests/integration/test_pauses.py
      tests/integration/test_unserved_views.py tests/integration/test_cli.py
      tests/integration/test_rate_limits.py tests/integration/test_mariadb.py
      tests/integration/test_mariadb_races.py tests/integration/test_mariadb_retention.py
      tests/integration/test_django_mariadb.py tests/integration/test_mariadb_periodic.py
      tests/integration/test_mariadb_results.py tests/integration/test_mariadb_roles.py
      tests/integration/test_mariadb_cli.py tests/integration/test_mariadb_broker.py
      tests/integration/test_mariadb_bench.py tests/integration/test_mariadb_sticky_retry.py
      tests/integration/test_startup_imports.py)
# PostgreSQL connections free for the suite: the three groups side by side peak
# at about 76 (sampled from pg_stat_activity over a whole run), so with fewer
# than PARALLEL_SLOTS free (another client holds many, or max_connections was
# lowered) they run one after another instead, slower but within the server
# (LEDGERQ_TEST_PARALLEL_SLOTS sets the threshold).
PARALLEL_SLOTS="${LEDGERQ_TEST_PARALLEL_SLOTS:-90}"
free_slots() {
    "$VENV/bin/python" - <<'PY'
import os
import psycopg
from sqlalchemy.engine import make_url
from ledgerq.ledger.pg.engines import libpq_url
url = os.environ.get("LEDGERQ_TEST_DATABASE_URL") or os.environ["LEDGERQ_DATABASE_URL"]
with psycopg.connect(libpq_url(make_url(url).set(database="postgres").render_as_string(False))) as conn:
    row = conn.execute(
        "SELECT current_setting('max_connections')::int"
        " - current_setting('superuser_reserved_connections')::int"
        " - (SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend')"
    ).fetchone()
print(row[0] if row else 0)
PY
}
slots="$(free_slots)"
ignored=()
for file in "${slow[@]}"; do ignored+=("--ignore=$file"); done
if [ "$slots" -lt "$PARALLEL_SLOTS" ]; then
    say "PostgreSQL has $slots connections free (the three groups side by side need $PARALLEL_SLOTS): running them one after another"
    status=0
    "$VENV/bin/pytest" --ignore=tests/faults "${ignored[@]}" "$@" || status=$?
    LEDGERQ_TEST_DATABASE_URL="$(test_db_url _slow)" "$VENV/bin/pytest" "${slow[@]}" "$@" || status=$?
    LEDGERQ_TEST_DATABASE_URL="$(test_db_url _faults)" "$VENV/bin/pytest" tests/faults "$@" || status=$?
    [ "$status" = 0 ] || die "pytest failed (see above)"
    say "all tests passed"
    exit 0
fi
faults_log="$(mktemp -t ledgerq-faults.XXXXXX.log)"
slow_log="$(mktemp -t ledgerq-slow.XXXXXX.log)"
say "pytest tests/faults in the background (log: $faults_log)"
LEDGERQ_TEST_DATABASE_URL="$(test_db_url _faults)" \
    "$VENV/bin/pytest" tests/faults -p no:cacheprovider "$@" >"$faults_log" 2>&1 &
faults_pid=$!
say "pytest ${slow[*]} in the background (log: $slow_log)"
LEDGERQ_TEST_DATABASE_URL="$(test_db_url _slow)" \
    "$VENV/bin/pytest" "${slow[@]}" -p no:cacheprovider "$@" >"$slow_log" 2>&1 &
slow_pid=$!
trap 'kill "$faults_pid" "$slow_pid" 2>/dev/null || true' EXIT
say "pytest (everything else)"
rest=0
"$VENV/bin/pytest" --ignore=tests/faults "${ignored[@]}" "$@" || rest=$?
slower=0
wait "$slow_pid" || slower=$?
faults=0
wait "$faults_pid" || faults=$?
trap - EXIT
say "pytest ${slow[*]} (ran beside the rest)"
cat "$slow_log"
say "pytest tests/faults (ran beside the rest)"
cat "$faults_log"
rm -f "$faults_log" "$slow_log"
[ "$rest" = 0 ] || die "pytest (everything else) failed: exit $rest"
[ "$slower" = 0 ] || die "pytest ${slow[*]} failed: exit $slower"
[ "$faults" = 0 ] || die "pytest tests/faults failed: exit $faults"
say "all tests passed"
