"""Every state change the ledger can make, derived from ``queries.sql`` itself and
checked against :data:`ledgerq.ledger.states.TRANSITIONS`.

The SQL is read, not run. For each named statement (split by
:func:`ledgerq.ledger.sql.parse`, the loader's own splitter) every part that
writes a task's status is found:

* ``UPDATE ledgerq_tasks ... SET status = '<to>' ... WHERE ... status ...``;
* ``DELETE FROM ledgerq_tasks ... WHERE ... status ...`` whose rows an
  ``INSERT INTO ledgerq_history ... SELECT ... FROM <that delete>`` buries, the
  history row's ``status`` being a literal or a column the delete returns (a
  ``CASE ... THEN '<to>' ... ELSE '<to>' END AS <column>``);
* ``INSERT INTO ledgerq_tasks`` with a literal status: the creation of a row, the
  one status write that is not a transition (it must be ``pending``), unless it
  selects from a ``DELETE FROM ledgerq_history`` in the same statement: then it
  revives finished rows (an operator's retry), from the statuses that DELETE's
  WHERE clause names.

``queries.sql``, the operator's ``operations.sql``, ``scheduling.sql`` and the
direct path's ``direct.sql`` are read.

The from-statuses are the ``status = '...'`` / ``status IN (...)`` condition on
the task row in the write's WHERE clause; the to-statuses are the literals written.
Each statement that changes a status says so in a ``-- transitions: a -> b, ...``
comment (read from the raw file: the loader drops comments), and the two must agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields
from importlib import resources

import pytest

from ledgerq.ledger.sql import DQ, IQ, OQ, SQ, Q, parse
from ledgerq.ledger.states import TRANSITIONS, Status

Pair = tuple[str, str]
#: The from-status of a created row.
NEW = "(new)"
#: Transitions made by no statement in queries.sql or operations.sql: a waiting
#: task's release, made by the ledger's function ledgerq_release (migration 0020).
OPERATOR_TRANSITIONS: frozenset[tuple[Status, Status]] = frozenset(
    {(Status.WAITING, Status.PENDING)}
)

STATUSES = {s.value for s in Status}
TABLES = ("ledgerq_tasks", "ledgerq_history")


def read(filename: str) -> str:
    return resources.files("ledgerq.ledger").joinpath(filename).read_text(encoding="utf-8")


# -- the raw file: annotations ----------------------------------------------------------

#: The loader's block header (``-- name: <name>``); the blocks found with it are
#: checked against the loader's own split below.
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)
_ANNOTATION = re.compile(r"^\s*--\s*transitions:\s*(.*?)\s*$", re.MULTILINE)
_PAIR = re.compile(r"^([a-z]+)\s*->\s*([a-z]+)$")


def raw_blocks(source: str) -> dict[str, str]:
    """``{name: block}`` with the comments kept."""
    parts = _HEADER.split(source)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def annotation(block: str) -> set[Pair] | None:
    """The pairs of the block's ``-- transitions:`` lines, or None if it has none."""
    lines = _ANNOTATION.findall(block)
    if not lines:
        return None
    pairs: set[Pair] = set()
    for line in lines:
        for item in line.split(","):
            match = _PAIR.match(item.strip())
            assert match, f"cannot read {item.strip()!r} in '-- transitions: {line}'"
            pairs.add((match[1], match[2]))
    return pairs


# -- the SQL: a small reader for the shapes the ledger uses ------------------------------


class Underivable(AssertionError):
    """A statement writes a status in a shape this reader does not understand: extend
    the reader (never guess)."""


def _scan(sql: str) -> list[int]:
    """Parenthesis depth before each character, with quoted literals kept at their depth."""
    depths, depth, quoted = [], 0, False
    for char in sql:
        depths.append(depth)
        if char == "'":
            quoted = not quoted
        elif not quoted and char == "(":
            depth += 1
        elif not quoted and char == ")":
            depth -= 1
    return depths


def top_level(sql: str, pattern: str) -> re.Match[str] | None:
    """The first match of ``pattern`` (case-insensitive) outside any parentheses."""
    depths = _scan(sql)
    for match in re.finditer(pattern, sql, re.IGNORECASE):
        if depths[match.start()] == 0:
            return match
    return None


def closing(sql: str, open_at: int) -> int:
    """The index of the parenthesis closing the one at ``open_at``."""
    depths = _scan(sql)
    for i in range(open_at + 1, len(sql)):
        if sql[i] == ")" and depths[i] == depths[open_at] + 1:
            return i
    raise Underivable(f"unbalanced parentheses after {sql[open_at : open_at + 40]!r}")


def split_commas(sql: str) -> list[str]:
    """Split on the commas outside parentheses and literals."""
    depths, parts, last, quoted = _scan(sql), [], 0, False
    for i, char in enumerate(sql):
        if char == "'":
            quoted = not quoted
        elif char == "," and not quoted and depths[i] == 0:
            parts.append(sql[last:i].strip())
            last = i + 1
    parts.append(sql[last:].strip())
    return parts


def clause(sql: str, keyword: str, enders: tuple[str, ...]) -> str | None:
    """The text of a top-level clause: from ``keyword`` to the first top-level ender."""
    found = top_level(sql, rf"\b{keyword}\b")
    if found is None:
        return None
    rest = sql[found.end() :]
    end = len(rest)
    for ender in enders:
        stop = top_level(rest, rf"\b{ender}\b")
        if stop is not None:
            end = min(end, stop.start())
    return rest[:end]


@dataclass
class Segment:
    """One statement of a (possibly WITH-) statement: a CTE body, or the main one."""

    name: str | None
    sql: str


def segments(sql: str) -> list[Segment]:
    text = sql.strip()
    if not re.match(r"WITH\b", text, re.IGNORECASE):
        return [Segment(None, text)]
    pos, found = len("WITH"), []
    while True:
        cte = re.compile(
            r"\s*,?\s*(\w+)\s+AS\s*(?:NOT\s+)?(?:MATERIALIZED\s*)?\(", re.IGNORECASE
        ).match(text, pos)
        if cte is None:
            found.append(Segment(None, text[pos:].strip()))
            return found
        end = closing(text, cte.end() - 1)
        found.append(Segment(cte[1], text[cte.end() : end].strip()))
        pos = end + 1


#: ``status`` (or ``alias.status``) and, if it is one this reader understands, its test.
_STATUS_CONDITION = re.compile(
    r"(?:\b(\w+)\.|(?<![\w.]))status\b\s*(?:=\s*'(\w+)'|IN\s*\(((?:\s*'\w+'\s*,?)+)\))?",
    re.IGNORECASE,
)


def task_alias(segment: str, verb: str) -> str:
    match = re.match(
        rf"{verb}\s+ledgerq_tasks(?:\s+(?!SET\b|USING\b|WHERE\b|FROM\b)(\w+))?",
        segment,
        re.IGNORECASE,
    )
    assert match, segment
    return match[1] or "ledgerq_tasks"


def from_statuses(where: str | None, alias: str, what: str) -> set[str]:
    """The statuses the WHERE clause lets the write act on (one condition on the row)."""
    if where is None:
        raise Underivable(f"{what}: writes a status with no WHERE clause (no compare-and-set)")
    found: list[set[str]] = []
    for match in _STATUS_CONDITION.finditer(where):
        qualifier, single, many = match.groups()
        if qualifier not in (None, alias, "ledgerq_tasks"):
            continue  # another table's status column
        if not (single or many):
            raise Underivable(f"{what}: cannot read the condition {match[0]!r}")
        found.append({single} if single else set(re.findall(r"'(\w+)'", many)))
    if len(found) != 1:
        raise Underivable(f"{what}: expected one status condition on the row, found {found}")
    return found[0]


def literal_statuses(expression: str, what: str) -> set[str]:
    """The statuses an expression writes: a literal, or a CASE's THEN/ELSE literals."""
    expression = expression.strip()
    single = re.fullmatch(r"'(\w+)'(?:::\w+)?", expression)
    if single:
        return {single[1]}
    if re.match(r"CASE\b", expression, re.IGNORECASE):
        results = re.findall(r"\b(?:THEN|ELSE)\s+'(\w+)'", expression, re.IGNORECASE)
        branches = re.findall(r"\b(?:THEN|ELSE)\b", expression, re.IGNORECASE)
        if results and len(results) == len(branches):
            return set(results)
    raise Underivable(f"{what}: cannot read the status written by {expression!r}")


def _update(segment: Segment, what: str) -> set[Pair]:
    set_clause = clause(segment.sql, "SET", ("FROM", "WHERE", "RETURNING"))
    assert set_clause is not None, what
    written = [
        item.split("=", 1)[1]
        for item in split_commas(set_clause)
        if re.match(r"(?:\w+\.)?status\s*=", item, re.IGNORECASE)
    ]
    if not written:
        return set()  # heartbeat, checkpoint: the status stays
    to = set().union(*(literal_statuses(w, what) for w in written))
    where = clause(segment.sql, "WHERE", ("RETURNING",))
    sources = from_statuses(where, task_alias(segment.sql, "UPDATE"), what)
    return {(a, b) for a in sources for b in to}


def _insert_columns(sql: str, table: str, what: str) -> tuple[list[str], str]:
    """The column list of an INSERT and the text after it."""
    head = re.match(rf"INSERT\s+INTO\s+{table}\s*\(", sql, re.IGNORECASE)
    if head is None:
        raise Underivable(f"{what}: an INSERT without a column list")
    end = closing(sql, head.end() - 1)
    columns = [c.strip().lower() for c in sql[head.end() : end].split(",")]
    return columns, sql[end + 1 :].strip()


def _inserted_status(columns: list[str], rest: str, what: str) -> tuple[str, str | None]:
    """The expression inserted as ``status`` and the source it is selected from."""
    if "status" not in columns:
        raise Underivable(f"{what}: the INSERT names no status column")
    index = columns.index("status")
    values = re.match(r"VALUES\s*\(", rest, re.IGNORECASE)
    if values:
        items = split_commas(rest[values.end() : closing(rest, values.end() - 1)])
        return items[index], None
    select_list = clause(rest, "SELECT", ("FROM",))
    if select_list is None:
        raise Underivable(f"{what}: an INSERT from neither VALUES nor SELECT")
    source = top_level(rest, r"\bFROM\s+(\w+)")
    return split_commas(select_list)[index], source[1] if source else None


def _returned(delete_sql: str, column: str) -> str | None:
    """The expression a DELETE's RETURNING names ``column`` (``... AS column``)."""
    returning = clause(delete_sql, "RETURNING", ())
    for item in split_commas(returning or ""):
        named = re.fullmatch(rf"(.*?)\s+AS\s+{column}", item, re.IGNORECASE | re.DOTALL)
        if named:
            return named[1]
    return None


_WRITES_LIVE = r"\b(?:UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+ledgerq_tasks\b"


@dataclass
class Derived:
    """What one statement does to task statuses, as read from its SQL."""

    pairs: set[Pair] = field(default_factory=set)
    creates: set[str] = field(default_factory=set)
    notes: list[str] = field(default_factory=list)  # writes that change no live status


def _revived(part: Segment, history: dict[str | None, Segment], what: str) -> set[Pair] | None:
    """The transitions of an ``INSERT INTO ledgerq_tasks`` that selects the rows a
    ``DELETE FROM ledgerq_history`` of the same statement returns; None if it does not."""
    columns, rest = _insert_columns(part.sql, "ledgerq_tasks", what)
    expression, source = _inserted_status(columns, rest, what)
    if source is None or source not in history:
        return None
    to = literal_statuses(expression, what)
    delete = history[source]
    where = clause(delete.sql, "WHERE", ("RETURNING",))
    alias = re.match(
        r"DELETE\s+FROM\s+ledgerq_history(?:\s+(?!USING\b|WHERE\b)(\w+))?", delete.sql, re.I
    )
    assert alias, what
    sources = from_statuses(where, alias[1] or "ledgerq_history", what)
    return {(a, b) for a in sources for b in to}


def _created(part: Segment, what: str) -> set[str]:
    """The statuses an ``INSERT INTO ledgerq_tasks`` gives the rows it creates."""
    columns, rest = _insert_columns(part.sql, "ledgerq_tasks", what)
    expression, _ = _inserted_status(columns, rest, what)
    if re.search(r"ON\s+CONFLICT[^;]*DO\s+UPDATE", rest, re.IGNORECASE):
        raise Underivable(f"{what}: ON CONFLICT DO UPDATE may rewrite a live status")
    return literal_statuses(expression, what)


def _buried(
    part: Segment, deletes: dict[str | None, Segment], what: str
) -> tuple[str, set[Pair]] | None:
    """The DELETE (in the same statement) whose live rows an ``INSERT INTO
    ledgerq_history`` moves there, and their transitions; None if its rows come from
    elsewhere."""
    columns, rest = _insert_columns(part.sql, "ledgerq_history", what)
    expression, source = _inserted_status(columns, rest, what)
    if source is None or source not in deletes:
        return None
    delete = deletes[source]
    if not re.fullmatch(r"'\w+'", expression.strip()):
        returned = _returned(delete.sql, expression.strip())
        if returned is None:
            raise Underivable(f"{what}: cannot find {expression!r} in {source}")
        expression = returned
    to = literal_statuses(expression, what)
    where = clause(delete.sql, "WHERE", ("RETURNING",))
    sources = from_statuses(where, task_alias(delete.sql, r"DELETE\s+FROM"), what)
    return source, {(a, b) for a in sources for b in to}


def _is(pattern: str, sql: str) -> bool:
    return re.match(pattern, sql, re.IGNORECASE) is not None


def _inserted_live(
    part: Segment, history: dict[str | None, Segment], what: str, derived: Derived
) -> None:
    """A live row inserted: created as pending, or revived from history."""
    revived = _revived(part, history, what)
    if revived is None:
        derived.creates |= _created(part, what)
    else:
        derived.pairs |= revived


def derive(name: str, sql: str) -> Derived:
    """The transitions ``sql`` makes (raises Underivable if it cannot tell)."""
    parts = segments(sql)
    deletes = {p.name: p for p in parts if _is(r"DELETE\s+FROM\s+ledgerq_tasks\b", p.sql)}
    history = {p.name: p for p in parts if _is(r"DELETE\s+FROM\s+ledgerq_history\b", p.sql)}
    buried: set[str | None] = set()
    derived = Derived()
    for part in parts:
        what = f"{name} ({part.name or 'main'})"
        if _is(r"UPDATE\s+ledgerq_tasks\b", part.sql):
            derived.pairs |= _update(part, what)
        elif _is(r"INSERT\s+INTO\s+ledgerq_tasks\b", part.sql):
            _inserted_live(part, history, what, derived)
        elif _is(r"INSERT\s+INTO\s+ledgerq_history\b", part.sql):
            moved = _buried(part, deletes, what)
            if moved is None:
                derived.notes.append(f"{what}: history rows made from no live task")
            else:
                buried.add(moved[0])
                derived.pairs |= moved[1]
        elif _is(r"(DELETE\s+FROM|UPDATE|TRUNCATE|MERGE\s+INTO)\s+ledgerq_history\b", part.sql):
            derived.notes.append(f"{what}: changes finished rows only")
        elif re.search(r"\b(TRUNCATE|MERGE\s+INTO)\b[^;]*\bledgerq_tasks\b", part.sql, re.I):
            derived.notes.append(f"{what}: empties or merges live rows")
    read_writes = sum(_is(_WRITES_LIVE, p.sql) for p in parts)
    if read_writes != len(re.findall(_WRITES_LIVE, sql, re.IGNORECASE)):
        raise Underivable(f"{name}: writes live rows somewhere this reader does not look")
    vanished = set(deletes) - buried
    if vanished:
        raise Underivable(f"{name}: deletes live rows without moving them to history: {vanished}")
    return derived


# -- the statements, read once --------------------------------------------------------

QUERIES_RAW = "\n".join(
    read(f) for f in ("queries.sql", "operations.sql", "scheduling.sql", "direct.sql")
)
STATEMENTS = parse(QUERIES_RAW)
BLOCKS = raw_blocks(QUERIES_RAW)
DERIVED = {name: derive(name, sql) for name, sql in STATEMENTS.items()}
INSPECTION = parse(read("inspection.sql"))


def known_pairs() -> set[Pair]:
    return {(a.value, b.value) for a, b in TRANSITIONS}


def test_the_file_read_here_is_the_one_the_ledger_loads() -> None:
    loaded = {f.name: getattr(Q, f.name) for f in fields(Q)}
    loaded.update({f.name: getattr(OQ, f.name) for f in fields(OQ)})
    loaded.update({f.name: getattr(SQ, f.name) for f in fields(SQ)})
    loaded.update({f.name: getattr(DQ, f.name) for f in fields(DQ)})
    assert set(STATEMENTS) == set(BLOCKS) == set(loaded)
    for name, sql in STATEMENTS.items():
        assert loaded[name].text == sql, name
    assert {name: getattr(IQ, name).text for name in INSPECTION} == INSPECTION


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_statement_is_annotated_with_exactly_the_transitions_its_sql_makes(name: str) -> None:
    derived, annotated = DERIVED[name].pairs, annotation(BLOCKS[name])
    if derived:
        assert annotated is not None, (
            f"{name} changes task statuses {sorted(derived)} but has no '-- transitions:' line"
        )
    assert (annotated or set()) == derived, (
        f"{name}: the annotation says {sorted(annotated or set())}, the SQL does {sorted(derived)}"
    )


@pytest.mark.parametrize("name", sorted(STATEMENTS))
def test_each_statement_makes_only_transitions_the_state_machine_allows(name: str) -> None:
    derived = DERIVED[name]
    for source, target in derived.pairs:
        assert source in STATUSES and target in STATUSES, (name, source, target)
    assert derived.pairs <= known_pairs(), (
        f"{name} makes {sorted(derived.pairs - known_pairs())}, which states.TRANSITIONS lacks"
    )
    assert derived.creates <= {Status.PENDING.value}, f"{name} creates {derived.creates} rows"


def test_every_annotated_pair_names_real_statuses() -> None:
    for name, block in BLOCKS.items():
        for source, target in annotation(block) or set():
            assert {source, target} <= STATUSES, (name, source, target)


def test_every_transition_in_the_state_machine_is_made_by_some_statement() -> None:
    made = set().union(*(d.pairs for d in DERIVED.values()))
    expected = known_pairs() - {(a.value, b.value) for a, b in OPERATOR_TRANSITIONS}
    assert expected - made == set(), f"no statement makes {sorted(expected - made)}"
    # and the statements derive something at all (the reader is not blind)
    assert made == expected


def test_the_statements_that_change_status_are_the_ones_expected() -> None:
    # A change here is fine, if deliberate: a new statement that writes a status.
    changing = sorted(name for name, d in DERIVED.items() if d.pairs)
    assert changing == [
        "cancel_queued",
        "claim",
        "claim_due",
        "expire_due",
        "finish",
        "mark_published",
        "publish_due",
        "reschedule",
        "retry_history",
        "return_unpublished",
        "unpublish_paused",
        "unpublish_unserved",
    ]
    creating = sorted(name for name, d in DERIVED.items() if d.creates)
    assert creating == ["insert_task", "insert_task_once", "insert_tasks", "insert_tasks_once"]


def test_only_creation_writes_a_status_without_a_transition_annotation() -> None:
    unannotated_writers = sorted(
        name
        for name, d in DERIVED.items()
        if (d.pairs or d.creates) and annotation(BLOCKS[name]) is None
    )
    assert unannotated_writers == sorted(n for n, d in DERIVED.items() if d.creates)


def test_the_annotations_together_match_the_state_machine() -> None:
    annotated = set().union(*(annotation(b) or set() for b in BLOCKS.values()))
    assert annotated == known_pairs() - {(a.value, b.value) for a, b in OPERATOR_TRANSITIONS}


def test_inspection_sql_changes_no_live_tasks_status() -> None:
    for name, sql in INSPECTION.items():
        derived = derive(name, sql)
        assert derived.pairs == set() and derived.creates == set(), name
        writes_live = re.search(
            r"\b(UPDATE|INSERT\s+INTO|DELETE\s+FROM)\s+ledgerq_tasks\b", sql, re.IGNORECASE
        )
        assert writes_live is None, f"inspection.sql {name} writes live tasks: {writes_live}"
    # Emptying every table is the one maintenance statement that touches live rows
    # (tests, demo and benchmark only); it removes them (a DELETE or a TRUNCATE of
    # each table it names), never sets their status.
    touching_live = sorted(
        name
        for name, sql in INSPECTION.items()
        if re.search(r"\bTRUNCATE\b[^;]*\bledgerq_tasks\b", sql, re.I)
        or re.search(r"ARRAY\[[^\]]*'ledgerq_tasks'", sql)  # a table list to empty
    )
    assert touching_live == ["truncate"]
    emptying = INSPECTION["truncate"]
    assert "format('DELETE FROM %I', t)" in emptying and "'TRUNCATE '" in emptying
    assert not re.search(r"\b(UPDATE|INSERT)\b", emptying, re.I)


# -- the reader itself: it sees a transition, and refuses what it cannot read ---------


@pytest.mark.parametrize(
    ("sql", "pairs"),
    [
        (
            "UPDATE ledgerq_tasks t SET status = 'dead', worker = NULL "
            "WHERE t.id = :id AND t.status = 'published' RETURNING t.id",
            {("published", "dead")},
        ),
        (
            "UPDATE ledgerq_tasks SET run_at = now(), status = CASE WHEN x THEN 'pending' "
            "ELSE 'dead' END WHERE id = :id AND status IN ('running', 'published')",
            {
                ("running", "pending"),
                ("running", "dead"),
                ("published", "pending"),
                ("published", "dead"),
            },
        ),
        ("UPDATE ledgerq_tasks SET heartbeat_at = now() WHERE status = 'running'", set()),
        (
            "WITH gone AS (DELETE FROM ledgerq_tasks t WHERE t.status = 'pending' "
            "RETURNING t.*) INSERT INTO ledgerq_history (id, status) "
            "SELECT id, 'cancelled' FROM gone",
            {("pending", "cancelled")},
        ),
    ],
)
def test_the_reader_derives_transitions_from_sql(sql: str, pairs: set[Pair]) -> None:
    assert derive("example", sql).pairs == pairs


@pytest.mark.parametrize(
    "sql",
    [
        "UPDATE ledgerq_tasks SET status = 'pending'",  # no compare-and-set
        "UPDATE ledgerq_tasks SET status = :status WHERE status = 'running'",
        "UPDATE ledgerq_tasks t SET status = 'dead' WHERE t.status <> 'running'",
        "DELETE FROM ledgerq_tasks WHERE status = 'running'",  # vanishes, no history
        "INSERT INTO ledgerq_tasks (kind, status) VALUES ('k', :status)",
    ],
)
def test_the_reader_refuses_a_status_write_it_cannot_read(sql: str) -> None:
    with pytest.raises(Underivable):
        derive("example", sql)


def test_an_annotation_that_disagrees_with_the_sql_is_caught() -> None:
    block = (
        "\n-- transitions: running -> succeeded\n"
        "UPDATE ledgerq_tasks SET status = 'pending' WHERE status = 'running'\n"
    )
    [(name, sql)] = parse("-- name: example" + block).items()
    assert annotation(block) == {("running", "succeeded")}
    assert derive(name, sql).pairs == {("running", "pending")}
