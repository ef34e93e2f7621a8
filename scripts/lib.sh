# Shared set-up for scripts/demo.sh and scripts/test.sh. Sourced, not run.
#
# ensure_venv:     .venv with the locked dependencies and ledgerq installed (editable),
#                  and ledgerq's own modules compiled to bytecode.
# ensure_test_servers: the installed server programs the tests start private
#                  copies of (the fault suite's own RabbitMQ node, the TLS
#                  tests' PostgreSQL cluster and RabbitMQ node, a PgBouncer, a
#                  pg_auto_failover cluster), and the browser the dashboard's
#                  tests drive (/usr/bin/chromium).
# ensure_mariadb:  the MariaDB server the MySQL ledger's tests use
#                  (LEDGERQ_TEST_MARIADB_URL's, else 127.0.0.1:3306, user root with
#                  no password: tests/mariadb.py), started if installed, else
#                  installed from the OS packages (mariadb-server) as root.
# ensure_services: PostgreSQL and RabbitMQ reachable at the configured URLs. It
#                  uses servers already running there; else starts locally
#                  installed ones; else, as root on Debian/Ubuntu, installs them
#                  from the OS packages; else stops with a message naming
#                  deploy/compose.yaml.

set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.venv"
export LEDGERQ_DATABASE_URL="${LEDGERQ_DATABASE_URL:-postgresql+psycopg://postgres@127.0.0.1:5432/ledgerq}"
export LEDGERQ_AMQP_URL="${LEDGERQ_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}"

say() { printf '\033[1m==> %s\033[0m\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }

is_root() { [ "$(id -u)" -eq 0 ]; }

apt_install() {
    is_root || return 1
    command -v apt-get >/dev/null 2>&1 || return 1
    say "installing $* from the OS packages"
    if [ -z "${LEDGERQ_APT_UPDATED:-}" ]; then
        DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
        export LEDGERQ_APT_UPDATED=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

ensure_python() {
    command -v python3 >/dev/null 2>&1 || apt_install python3 python3-venv \
        || die "python3 (>= 3.11) is needed: install it, e.g. 'apt-get install python3 python3-venv'"
    python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
        || die "python3 >= 3.11 is needed; found $(python3 --version 2>&1)"
    python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || apt_install python3-venv \
        || die "python3's venv module is missing: install it, e.g. 'apt-get install python3-venv'"
}

ensure_venv() {
    ensure_python
    local stamp="$VENV/.ledgerq-installed"
    local want
    want="$(cat "$ROOT/requirements.lock" "$ROOT/pyproject.toml" | sha256sum | cut -c1-16)"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
        return 0
    fi
    say "creating the virtual environment in .venv (locked dependencies)"
    [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check -r "$ROOT/requirements.lock"
    "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -e "$ROOT"
    echo "$want" > "$stamp"
}

# ledgerq's own bytecode. pip compiled the dependencies when it installed them,
# but the editable package is compiled by whichever process imports it first, and
# not at all where PYTHONDONTWRITEBYTECODE is set: then every `ledgerq` process
# (the test suite starts hundreds) compiles its ~200 modules again, about half a
# second of CPU each. So the scripts write the bytecode (it is ignored by git)
# and let the processes they start read it.
ensure_bytecode() {
    unset PYTHONDONTWRITEBYTECODE
    "$VENV/bin/python" -m compileall -q -j 0 "$ROOT/ledgerq" "$ROOT/tests" >/dev/null
}

# host and port of a URL, via Python's URL parser (no third-party packages needed).
url_host_port() {
    python3 - "$1" "$2" <<'PY'
import sys, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
print(u.hostname or "127.0.0.1", u.port or int(sys.argv[2]))
PY
}

port_open() { (exec 3<>"/dev/tcp/$1/$2") >/dev/null 2>&1; }

wait_port() {
    local host=$1 port=$2 what=$3 i
    for i in $(seq 1 90); do
        port_open "$host" "$port" && return 0
        sleep 1
    done
    die "$what did not start listening on $host:$port within 90 s"
}

is_local() { case "$1" in 127.*|localhost|::1) return 0;; *) return 1;; esac; }

no_service() {
    die "$1 is not reachable at $2:$3 and cannot be started here.
  Either point ${4} at a running server, or start both services with Docker:
      docker compose -f deploy/compose.yaml up -d postgres rabbitmq"
}

start_postgres() {
    if command -v pg_ctlcluster >/dev/null 2>&1 && [ -n "$(ls /etc/postgresql 2>/dev/null)" ]; then
        local version
        for version in $(ls /etc/postgresql); do
            say "starting the local PostgreSQL $version cluster"
            pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
                || pg_ctlcluster "$version" main start 2>/dev/null || true
        done
        return 0
    fi
    apt_install postgresql || return 1
    local version
    version="$(ls /etc/postgresql | sort -V | tail -1)"
    # A server installed just now, for this machine's development: let local TCP
    # connections in without a password, as the default URL expects.
    sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' \
        "/etc/postgresql/$version/main/pg_hba.conf"
    pg_ctlcluster --skip-systemctl-redirect "$version" main start 2>/dev/null \
        || pg_ctlcluster "$version" main start
}

start_rabbitmq() {
    if command -v rabbitmq-server >/dev/null 2>&1; then
        say "starting the local RabbitMQ"
        rabbitmq-server -detached >/dev/null 2>&1 || true
        return 0
    fi
    apt_install rabbitmq-server || return 1
    rabbitmq-server -detached >/dev/null 2>&1 || true
}

ensure_services() {
    local host port
    read -r host port < <(url_host_port "${LEDGERQ_DATABASE_URL/+psycopg/}" 5432)
    if ! port_open "$host" "$port"; then
        is_local "$host" || no_service PostgreSQL "$host" "$port" LEDGERQ_DATABASE_URL
        start_postgres || no_service PostgreSQL "$host" "$port" LEDGERQ_DATABASE_URL
        wait_port "$host" "$port" PostgreSQL
    fi
    read -r host port < <(url_host_port "$LEDGERQ_AMQP_URL" 5672)
    if ! port_open "$host" "$port"; then
        is_local "$host" || no_service RabbitMQ "$host" "$port" LEDGERQ_AMQP_URL
        start_rabbitmq || no_service RabbitMQ "$host" "$port" LEDGERQ_AMQP_URL
        wait_port "$host" "$port" RabbitMQ
    fi
}

# MariaDB for the MySQL ledger's tests. A server installed here, just now, for this
# machine's development: root may connect over local TCP without a password, as
# the tests' default URL expects (Debian's root@localhost authenticates by socket).
start_mariadb() {
    local installed=0
    if [ ! -x /usr/sbin/mariadbd ]; then
        apt_install mariadb-server || return 1
        installed=1
    fi
    say "starting the local MariaDB"
    if [ -x /etc/init.d/mariadb ]; then
        /etc/init.d/mariadb start >/dev/null 2>&1 || true
    fi
    if ! port_open 127.0.0.1 3306 && command -v mysqld_safe >/dev/null 2>&1; then
        (mysqld_safe >/dev/null 2>&1 &)
    fi
    wait_port 127.0.0.1 3306 MariaDB
    if [ "$installed" = 1 ]; then
        mariadb -e "CREATE USER IF NOT EXISTS 'root'@'127.0.0.1' IDENTIFIED BY '';
                    GRANT ALL PRIVILEGES ON *.* TO 'root'@'127.0.0.1' WITH GRANT OPTION;"
    fi
}

ensure_mariadb() {
    local host port
    read -r host port < <(url_host_port "${LEDGERQ_TEST_MARIADB_URL:-mariadb://127.0.0.1:3306/}" 3306)
    if port_open "$host" "$port"; then
        return 0
    fi
    is_local "$host" \
        || die "MariaDB is not reachable at $host:$port (LEDGERQ_TEST_MARIADB_URL): start it, or unset the variable to use a local one"
    start_mariadb \
        || die "the MySQL ledger's tests need MariaDB at $host:$port: install mariadb-server (10.6 or later)"
    wait_port "$host" "$port" MariaDB
}

ensure_test_servers() {
    ensure_mariadb
    if [ ! -x /usr/lib/rabbitmq/bin/rabbitmq-server ]; then
        apt_install rabbitmq-server \
            || die "the fault tests start a RabbitMQ node of their own: install rabbitmq-server"
    fi
    if [ ! -x /usr/sbin/pgbouncer ]; then
        apt_install pgbouncer \
            || die "the PgBouncer tests start a PgBouncer of their own: install pgbouncer"
    fi
    if [ ! -x /usr/bin/chromium ]; then
        apt_install chromium \
            || die "the dashboard's browser tests drive Debian's chromium: install chromium"
    fi
    ensure_failover_packages
}

# pg_auto_failover for the installed PostgreSQL major: the failover fault test
# (tests/failover.py) starts a monitor, a primary and a standby of its own.
ensure_failover_packages() {
    local major
    major="$(ls /usr/lib/postgresql 2>/dev/null | sort -V | tail -1)"
    if [ -z "$major" ]; then  # PostgreSQL itself runs elsewhere (Docker): its binaries here
        apt_install postgresql \
            || die "the failover test runs PostgreSQL's server binaries: install postgresql"
        major="$(ls /usr/lib/postgresql | sort -V | tail -1)"
    fi
    if [ ! -x /usr/bin/pg_autoctl ] \
        || [ ! -f "/usr/share/postgresql/$major/extension/pgautofailover.control" ]; then
        apt_install pg-auto-failover-cli "postgresql-$major-auto-failover" \
            || die "the failover test starts a pg_auto_failover cluster of its own: install pg-auto-failover-cli and postgresql-$major-auto-failover"
    fi
}
