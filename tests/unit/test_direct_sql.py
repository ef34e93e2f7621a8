"""The rule that picks due tasks is written once (migration 0014: the view
``ledgerq_ready`` and the function ``ledgerq_pick``), and every statement that
selects due work calls it instead of restating it: the relay's ``select_due``,
the reconciler's ``select_overdue`` and the direct path's ``claim_due``. A rule
restated in one of them, and so able to drift from the others, fails here."""

from __future__ import annotations

import importlib
import re

import pytest

from ledgerq.ledger.sql import DQ, Q

WINDOW = importlib.import_module("ledgerq.ledger.migrations.versions.0014_window")

#: Fragments of the rule: pauses, ordering keys, rate limits, aging, priority order.
RULE_FRAGMENTS = (
    "ledgerq_pauses",
    "ordering_key",
    "rate_per_s",
    "make_interval(secs => :aging_s)",
    "ORDER BY t.priority DESC",
)


def _without_history_row(sql: str) -> str:
    """The statement without the history row it writes for an expired task (the
    ``bury`` fragment names every column, ordering_key among them)."""
    return re.sub(r"INSERT INTO ledgerq_history.*?FROM ended", "", sql, flags=re.S)


PICKERS = {
    "select_due": Q.select_due.text,
    "select_overdue": Q.select_overdue.text,
    "claim_due": _without_history_row(DQ.claim_due.text),
}


@pytest.mark.parametrize("name", sorted(PICKERS))
def test_each_picker_calls_the_one_rule(name: str) -> None:
    assert "ledgerq_pick(" in PICKERS[name]


@pytest.mark.parametrize("name", sorted(PICKERS))
@pytest.mark.parametrize("fragment", RULE_FRAGMENTS)
def test_no_picker_restates_the_rule(name: str, fragment: str) -> None:
    assert fragment not in PICKERS[name]


def test_the_rule_lives_in_the_migration_once() -> None:
    ready, pick = WINDOW._READY, WINDOW._PICK
    # pauses and ordering keys: in the view only, each clause once
    assert ready.count("scope = 'queue'") == 1 and ready.count("scope = 'kind'") == 1
    assert "ledgerq_pauses" not in pick and "ordering_key" not in pick
    # the three selections read the view, never the table
    assert pick.count("FROM ledgerq_ready t") == 3 and "FROM ledgerq_tasks" not in pick


def test_relay_and_reconciler_pick_within_the_live_windows() -> None:
    for name in ("select_due", "select_overdue"):
        assert "FROM ledgerq_windows" in PICKERS[name]


def test_claim_due_claims_only_pending_rows_under_their_epoch() -> None:
    claim = DQ.claim_due.text[DQ.claim_due.text.index("claimed AS (") :]
    assert "t.id = m.id AND t.epoch = m.epoch AND t.status = 'pending'" in claim
    assert "epoch = t.epoch + 1" in claim
