"""Every statement that moves tasks to history tells result() waiters: a named
statement that includes ``{{bury}}`` also includes ``{{tell_ended}}`` (one
``NOTIFY ledgerq_ended`` per statement, fragments.sql) and joins it to its
answer, without which PostgreSQL would not evaluate the CTE. A new ending
statement that forgets fails here, naming it. The SQL is read, not run (the
conformance suite, tests/conformance/test_transaction_results.py, runs it)."""

from __future__ import annotations

import re
from importlib import resources

PACKAGE = resources.files("ledgerq.ledger")
_NAMED = re.compile(r"^-- name: (\S+)\n", re.MULTILINE)


def statements() -> dict[str, str]:
    """Every named statement of the ledger package's .sql files, raw."""
    found: dict[str, str] = {}
    for path in PACKAGE.iterdir():
        if not path.name.endswith(".sql") or path.name == "fragments.sql":
            continue
        parts = _NAMED.split(path.read_text(encoding="utf-8"))
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            found[f"{path.name}:{name}"] = body
    return found


def test_every_statement_that_buries_tells_the_waiters() -> None:
    burying = {name: body for name, body in statements().items() if "{{bury}}" in body}
    assert {"queries.sql:finish", "operations.sql:cancel_queued"} <= set(burying)
    silent = [
        name
        for name, body in burying.items()
        if "{{tell_ended}}" not in body or "LEFT JOIN told ON true" not in body
    ]
    assert not silent, f"statements that end tasks without NOTIFY ledgerq_ended: {silent}"
