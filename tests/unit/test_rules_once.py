"""Two rules that several statements share are written once, as fragments of
``ledger/fragments.sql`` that the loader splices in (ledger/sql.py): the history
row of a task leaving the hot table (``bury``: its 36 columns) and the
operator's task filter (``task_filter``, with the listed columns). A statement
that restates either, and so could drift from the others, fails here.

The SQL is read, not run: the raw files (what a person edits) and the loaded
statements (what the database is sent)."""

from __future__ import annotations

import re
from dataclasses import fields
from importlib import resources

import pytest

from ledgerq.ledger import sql as loader
from ledgerq.ledger.sql import FRAGMENTS, IQ, OQ, RQ, Q

PACKAGE = resources.files("ledgerq.ledger")
#: Every file of named statements the ledger package loads.
STATEMENT_FILES = sorted(
    p.name for p in PACKAGE.iterdir() if p.name.endswith(".sql") and p.name != "fragments.sql"
)
RAW = {name: PACKAGE.joinpath(name).read_text(encoding="utf-8") for name in STATEMENT_FILES}
LOADED = {
    f"{group}.{f.name}": getattr(queries, f.name).text
    for group, queries in (("Q", Q), ("OQ", OQ), ("IQ", IQ), ("RQ", RQ))
    for f in fields(queries)
}


def flat(text: str) -> str:
    """Whitespace folded, comments dropped: a restatement is found however laid out."""
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


def history_columns() -> str:
    head = re.match(r"INSERT INTO ledgerq_history \(([^)]*)\)", flat(FRAGMENTS["bury"]))
    assert head, "the bury fragment inserts into ledgerq_history with a column list"
    return head[1]


#: Pieces of the filter, each of which must exist once (in the fragment).
FILTER_CLAUSES = (
    "CAST(:kind AS text) IS NULL OR",
    "CAST(:queue AS text) IS NULL OR",
    "CAST(:business_key AS text) IS NULL OR",
    "CAST(:since AS timestamptz) IS NULL OR",
    "CAST(:until AS timestamptz) IS NULL OR",
    "CAST(:error AS text) IS NULL",
    "CAST(:ids AS bigint[]) IS NULL OR",
)


def test_the_history_row_lists_every_column_once() -> None:
    columns = [c.strip() for c in history_columns().split(",")]
    assert len(columns) == len(set(columns)) == 36


@pytest.mark.parametrize("filename", STATEMENT_FILES)
def test_no_file_restates_the_history_column_list(filename: str) -> None:
    assert history_columns() not in flat(RAW[filename])
    assert "heartbeat_at, worker, checkpoint" not in flat(RAW[filename])


def test_every_task_leaving_the_hot_table_is_buried_by_the_one_fragment() -> None:
    bury = FRAGMENTS["bury"]
    burying = {}
    for name, text in LOADED.items():
        if "INSERT INTO ledgerq_history" in text and "DELETE FROM ledgerq_tasks" in text:
            burying[name] = text
            assert text.count("INSERT INTO ledgerq_history") == 1, name
            assert flat(bury) in flat(text), f"{name} buries its rows without the fragment"
    # finish (a worker's verdicts) and the operator's cancel of queued tasks
    assert {"Q.finish", "OQ.cancel_queued"} <= set(burying)


@pytest.mark.parametrize("clause", FILTER_CLAUSES)
def test_the_task_filter_is_written_once(clause: str) -> None:
    assert flat(FRAGMENTS["task_filter"]).count(clause) == 1
    for filename, raw in RAW.items():
        assert clause not in flat(raw), f"{filename} restates the task filter"


def test_the_listing_applies_the_one_filter_to_each_branch() -> None:
    listing = flat(OQ.list_tasks.text)
    assert listing.count(flat(FRAGMENTS["task_filter"])) == 4
    assert listing.count(flat(FRAGMENTS["listed_columns"])) == 4
    for clause in FILTER_CLAUSES:
        assert listing.count(clause) == 4, clause


def includes(name: str, raw: str) -> bool:
    """Whether ``raw`` includes the fragment ``name``: ``{{name}}`` or ``{{name(...)}}``."""
    return re.search(r"\{\{\s*" + name + r"\s*(\(|\}\})", raw) is not None


def test_every_fragment_is_used() -> None:
    for name in FRAGMENTS:
        users = [f for f, raw in RAW.items() if includes(name, raw)]
        assert users, f"fragment {name} is included by no statement"


def test_no_loaded_statement_keeps_an_include() -> None:
    for name, text in LOADED.items():
        assert "{{" not in text and "}}" not in text, name


def test_an_unknown_fragment_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown fragment"):
        loader.parse("-- name: example\nSELECT 1 WHERE {{no_such_rule}}\n")


def test_a_fragment_is_spliced_at_the_including_lines_indent() -> None:
    [(_, text)] = loader.parse("-- name: example\nWITH a AS (\n    {{bury}}\n)\n").items()
    assert text.splitlines()[2].startswith("    ") and "FROM ended" in text
