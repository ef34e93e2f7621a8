"""The loader's fragments (ledger/sql.py): a fragment that includes fragments,
a fragment with parameters, and the errors both can make, each found when the
SQL is loaded (import time), never when a statement runs. Then the rules that
are written once through them: the claim (the broker path's claim and the
direct path's claim_due), the end of an expired task (claim, claim_due and
expire_due), and list_tasks's history branches (one instance per status). The
SQL is read, not run."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import TextClause

from ledgerq.ledger import sql as loader
from ledgerq.ledger.sql import DQ, FRAGMENTS, OQ, Q

LIBRARY = """
-- fragment: outer
SELECT 1
FROM (
    {{inner}}
) x

-- fragment: inner
SELECT a,
       b
FROM t

-- fragment: pick(column, value)
-- a comment is dropped
{{column}} = {{value}}
   AND {{inner_where}}

-- fragment: inner_where
y IS NOT NULL
"""


def one(source: str, library: str = LIBRARY) -> str:
    [(_, text)] = loader.parse("-- name: example\n" + source, loader.fragments(library)).items()
    return text


def test_a_fragment_includes_fragments_each_at_its_own_indent() -> None:
    assert one("WITH w AS (\n    {{outer}}\n)") == (
        "WITH w AS (\n"
        "    SELECT 1\n"
        "    FROM (\n"
        "        SELECT a,\n"
        "               b\n"
        "        FROM t\n"
        "    ) x\n"
        ")"
    )


def test_a_fragment_takes_its_values_in_order() -> None:
    text = one("SELECT * FROM t WHERE {{pick(t.status, 'dead')}}\nLIMIT 1")
    assert text == (
        "SELECT * FROM t WHERE t.status = 'dead'\n"
        "                         AND y IS NOT NULL\n"
        "LIMIT 1"
    )


def test_each_instance_has_its_own_values() -> None:
    text = one("{{pick(a, 1)}} OR {{pick(b, 'two')}}")
    assert "a = 1" in text and "b = 'two'" in text and "{{" not in text


@pytest.mark.parametrize(
    ("library", "message"),
    [
        ("-- fragment: a\n{{a}}\n", "a -> a"),
        (
            "-- fragment: a\n{{b}}\n-- fragment: b\nx {{c}}\n-- fragment: c\n{{a}}\n",
            "a -> b -> c -> a",
        ),
        ("-- fragment: a(p)\n{{p}} {{b(1)}}\n-- fragment: b(q)\n{{q}} {{a(2)}}\n", "a -> b -> a"),
    ],
)
def test_fragments_that_include_each_other_are_an_error(library: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        loader.fragments(library)


def test_a_cycle_is_an_error_when_expanded_too() -> None:
    looping = {"a": loader.Fragment((), "{{b}}"), "b": loader.Fragment((), "{{a}}")}
    with pytest.raises(ValueError, match="include each other: a -> b -> a"):
        loader.parse("-- name: example\n{{a}}\n", looping)


@pytest.mark.parametrize(
    "include", ["{{pick}}", "{{pick(a)}}", "{{pick(a, b, c)}}", "{{pick(a, )}}", "{{outer(a)}}"]
)
def test_the_wrong_count_of_values_is_an_error(include: str) -> None:
    with pytest.raises(ValueError, match="takes"):
        one(f"SELECT 1 WHERE {include}")


def test_a_parameter_the_body_never_reads_is_an_error() -> None:
    with pytest.raises(ValueError, match="never reads its parameters \\['q'\\]"):
        loader.fragments("-- fragment: a(p, q)\n{{p}}\n")


def test_a_parameter_is_named_once() -> None:
    with pytest.raises(ValueError, match="names a parameter twice"):
        loader.fragments("-- fragment: a(p, p)\n{{p}}\n")


def test_a_fragment_is_defined_once() -> None:
    with pytest.raises(ValueError, match="defined twice"):
        loader.fragments("-- fragment: a\nx\n-- fragment: a(p)\n{{p}}\n")


def test_an_unknown_fragment_inside_a_fragment_is_an_error() -> None:
    with pytest.raises(ValueError, match="unknown fragment"):
        one("{{outer}}", "-- fragment: outer\nSELECT {{missing}}\n")


def test_a_parameter_is_read_only_inside_its_fragment() -> None:
    # {{column}} is pick's parameter, not a fragment: a statement cannot read it
    with pytest.raises(ValueError, match="unknown fragment"):
        one("SELECT {{column}}")


# -- the rules written once through them -------------------------------------------------


def flat(text: str) -> str:
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("--")]
    return re.sub(r"\s+", " ", " ".join(lines)).strip()


CLAIMS = {"claim": Q.claim.text, "claim_due": DQ.claim_due.text}
EXPIRING = {**CLAIMS, "expire_due": Q.expire_due.text}


@pytest.mark.parametrize("name", sorted(CLAIMS))
@pytest.mark.parametrize("fragment", ["claim_set", "claimed_columns", "claim_answer"])
def test_both_claims_write_and_answer_by_the_one_rule(name: str, fragment: str) -> None:
    assert flat(CLAIMS[name]).count(flat(FRAGMENTS[fragment])) == 1


@pytest.mark.parametrize("name", sorted(EXPIRING))
def test_each_expiring_statement_ends_its_expired_tasks_by_the_one_rule(name: str) -> None:
    text = flat(EXPIRING[name])
    for rule in ("bury", "tell_ended", "expired_end"):
        assert text.count(flat(FRAGMENTS[rule])) == 1, rule
    assert text.count("INSERT INTO ledgerq_audit ") == 1
    assert "'expire'" in text and text.endswith("LEFT JOIN told ON true")


def test_every_loaded_statement_that_buries_tells_the_waiters() -> None:
    """test_tell_ended.py reads the raw files; a statement may now bury through a
    fragment (expired_burial), so the loaded text is checked as well."""
    loaded = {
        f"{group}.{name}": clause.text
        for group, queries in vars(loader).items()
        if group.isupper() and hasattr(queries, "__dataclass_fields__")
        for name, clause in vars(queries).items()
    }
    burying = [
        name
        for name, text in loaded.items()
        if "INSERT INTO ledgerq_history" in text and "DELETE FROM ledgerq_tasks" in text
    ]
    assert {"Q.finish", "Q.claim", "Q.expire_due", "DQ.claim_due"} <= set(burying)
    for name in burying:
        text = loaded[name]
        assert "pg_notify('ledgerq_ended'" in text and "LEFT JOIN told ON true" in text, name


def test_list_tasks_has_one_history_branch_per_status() -> None:
    listing = OQ.list_tasks.text
    for status in ("succeeded", "dead", "cancelled"):
        branch = f"'{status}' = ANY(CAST(:statuses AS text[])) AND x.status = '{status}'"
        assert listing.count(branch) == 1, status
    assert listing.count("FROM ledgerq_history x") == 3
    assert listing.count("FROM ledgerq_tasks x") == 1


@pytest.mark.parametrize(
    ("name", "setting", "values", "default"),
    [
        ("register_ordering", "ordering", "CAST(:orderings AS text[])", "'release'"),
        ("register_sticky", "sticky_s", "CAST(:seconds AS float8[])", "NULL"),
        ("register_children_done", "on_children_done", "CAST(:callbacks AS text[])", "NULL"),
    ],
)
def test_each_kind_setting_is_registered_by_the_one_rule(
    name: str, setting: str, values: str, default: str
) -> None:
    text = flat(getattr(Q, name).text)
    assert values in text  # the parameter the caller binds (ledger/pg/scheduling.py)
    assert f"INSERT INTO ledgerq_kinds AS k (kind, {setting})" in text
    assert f"WHERE value IS DISTINCT FROM {default}" in text
    assert f"SET {setting} = {default}, updated_at = now()" in text


@pytest.mark.parametrize(
    "clause",
    [OQ.request_cancel, OQ.reschedule, OQ.set_max_attempts, OQ.set_priority, Q.return_unpublished],
)
def test_the_operators_updates_are_fenced_by_the_one_rule(clause: TextClause) -> None:
    text = flat(clause.text)
    assert text.count(flat(FRAGMENTS["fence"])) == 1
    assert text.startswith("UPDATE ledgerq_tasks t SET") and text.endswith("RETURNING t.id")


def _history_columns(sql: str) -> list[str]:
    """The column list of the ``INSERT INTO ledgerq_history (...)`` in ``sql``."""
    found = re.search(r"INSERT INTO ledgerq_history \(([^)]*)\)", sql)
    assert found, "no INSERT INTO ledgerq_history"
    return [c.strip() for c in found.group(1).split(",")]


def test_the_ledgers_cancel_of_a_dependent_writes_every_column_the_bury_fragment_writes() -> None:
    # ledgerq_release (migration 0022, as created there) writes its history row itself,
    # inside the function; a history column the bury fragment gained and it did not
    # would be lost for every dependent the ledger cancels (0020 lost 0019's tags).
    import importlib

    release = importlib.import_module("ledgerq.ledger.migrations.versions.0022_dependency_upkeep")
    assert _history_columns(release.RELEASE) == _history_columns(FRAGMENTS["bury"])
