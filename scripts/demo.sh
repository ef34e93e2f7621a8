#!/usr/bin/env bash
# Set up (venv, services, schema) and run the end-to-end demo. Extra arguments go
# to `ledgerq demo` (for example --orders 3000 --workers 2 --json).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
ensure_venv
ensure_bytecode
ensure_services
cd "$ROOT"
say "migrating the ledger at ${LEDGERQ_DATABASE_URL}"
"$VENV/bin/ledgerq" migrate
say "running the demo"
"$VENV/bin/ledgerq" demo "$@"
say "see it: $VENV/bin/ledgerq dashboard   (then open http://127.0.0.1:8270/)"
