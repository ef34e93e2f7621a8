#!/usr/bin/env bash
# Set up (venv, services) and run every check: ruff, mypy --strict, the import
# contracts, then pytest (unit, integration, faults) against the real PostgreSQL
# and RabbitMQ. Extra arguments go to pytest (for example --long, or -k name).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_venv
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
say "pytest"
exec "$VENV/bin/pytest" "$@"
