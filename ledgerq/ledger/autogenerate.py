"""Keep ledgerq's schema out of an application's ``alembic revision --autogenerate``.

ledgerq's tables live in the application's database, next to its business
tables, but they are not in the application's metadata: left alone, the
application's autogenerate proposes to drop them. Pass :func:`include_name` (or
:func:`include_object`) to ``context.configure`` in the application's
``env.py``::

    from ledgerq.ledger.autogenerate import include_name

    context.configure(connection=connection, target_metadata=metadata,
                      include_name=include_name)

The names are derived, never listed by hand: ledgerq's own migrations are
rendered as SQL once, offline (no database), and every table, index and
sequence they create (and do not drop again) is ledgerq's, together with ledgerq's version table
(:data:`ledgerq.ledger.migrations.VERSION_TABLE`). A migration added later is
covered the day it is added. Everything belonging to one of those tables
(its columns, indexes and constraints) is left out with it; every other name is
the application's and is compared as usual. Names are matched whatever the
schema, since ledgerq's tables live in the connection's default schema.

History's day partitions are created at run time (by the reconciler's retention
pass, see ``relay/retention.py``), so no migration names them: a table named
``<table>_pYYYYMMDD`` after one of ledgerq's tables is ledgerq's too, and so is
everything belonging to it.
"""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from functools import cache
from importlib import resources
from typing import Any

from alembic.operations import Operations
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from ledgerq.ledger.migrations import VERSION_TABLE

_CREATED = re.compile(
    r"\b(CREATE|DROP)\s+(?:UNIQUE\s+|UNLOGGED\s+)?(TABLE|INDEX|SEQUENCE)\s+"
    r"(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"
    r"(?:\"?[A-Za-z_][A-Za-z0-9_]*\"?\.)?\"?([A-Za-z_][A-Za-z0-9_]*)",
    re.IGNORECASE,
)
#: A day partition of one of ledgerq's tables: ``ledgerq_history_dead_p20261123``.
_DAY_PARTITION = re.compile(r"(?P<parent>[A-Za-z_][A-Za-z0-9_]*)_p[0-9]{8}")


def _rendered_migrations() -> str:
    """Every ledgerq migration, base to head, as the SQL it would run on PostgreSQL."""
    script = ScriptDirectory(str(resources.files("ledgerq.ledger") / "migrations"))
    out = io.StringIO()
    context = MigrationContext.configure(
        dialect_name="postgresql", opts={"as_sql": True, "output_buffer": out}
    )
    with Operations.context(context):
        for revision in reversed(list(script.walk_revisions())):
            revision.module.upgrade()
    return out.getvalue()


@cache
def ledgerq_schema() -> Mapping[str, frozenset[str]]:
    """``{"table": ..., "index": ..., "sequence": ...}``: the names ledgerq's migrations create."""
    found: dict[str, set[str]] = {"table": {VERSION_TABLE}, "index": set(), "sequence": set()}
    for verb, kind, name in _CREATED.findall(_rendered_migrations()):  # in migration order
        if verb.upper() == "CREATE":
            found[kind.lower()].add(name)
        else:  # a later migration dropped it
            found[kind.lower()].discard(name)
    return {kind: frozenset(names) for kind, names in found.items()}


def is_ledgerq_name(name: str | None, type_: str, table_name: str | None = None) -> bool:
    """Whether an object Alembic compares (of ``type_``, on ``table_name``) is ledgerq's."""
    schema = ledgerq_schema()
    if type_ == "schema":
        return False
    if type_ == "table":
        return _is_ledgerq_table(name, schema)
    return _is_ledgerq_table(table_name, schema) or name in schema["index"]


def _is_ledgerq_table(name: str | None, schema: Mapping[str, frozenset[str]]) -> bool:
    if name is None:
        return False
    partition = _DAY_PARTITION.fullmatch(name)
    return name in schema["table"] or (
        partition is not None and partition["parent"] in schema["table"]
    )


def include_name(name: str | None, type_: str, parent_names: Mapping[str, str | None]) -> bool:
    """Alembic's ``include_name`` hook: False for ledgerq's tables and what belongs to them."""
    return not is_ledgerq_name(name, type_, parent_names.get("table_name"))


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    """Alembic's ``include_object`` hook, for an ``env.py`` that already uses that form."""
    table = getattr(obj, "table", None)
    return not is_ledgerq_name(name, type_, getattr(table, "name", None))


__all__ = ["include_name", "include_object", "is_ledgerq_name", "ledgerq_schema"]
