"""The named statements of ``testing.sql`` (PostgreSQL) and ``testing_mysql.sql``
(MySQL / MariaDB), loaded as :class:`HelperQueries`, one set per server, and
:func:`helper_params`, the parameters as the chosen set takes them."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from sqlalchemy import TextClause, bindparam

from ledgerq.ledger.sql import load

#: A parameter a MySQL statement reads as an IN list (bound as a list).
_IN_LIST = re.compile(r"\bIN\s+:(\w+)", re.IGNORECASE)
#: The selections a statement takes as "None: every one".
_SELECTIONS = ("queues", "kinds")


@dataclass(frozen=True)
class HelperQueries:
    """``ledgerq/testing/testing.sql``: what the test helpers read and move."""

    enqueued: TextClause
    due_kinds: TextClause
    next_due_in: TextClause
    advance: TextClause
    newest_pending: TextClause
    existing: TextClause


def _expanding(queries: HelperQueries) -> HelperQueries:
    marked = {}
    for f in fields(queries):
        clause: TextClause = getattr(queries, f.name)
        lists = sorted(set(_IN_LIST.findall(clause.text)))
        marked[f.name] = clause.bindparams(*(bindparam(name, expanding=True) for name in lists))
    return HelperQueries(**marked)


TQ = load(HelperQueries, "ledgerq.testing", "testing.sql")
MY_TQ = _expanding(load(HelperQueries, "ledgerq.testing", "testing_mysql.sql"))


def helper_queries(mysql: bool) -> HelperQueries:
    return MY_TQ if mysql else TQ


def helper_params(params: dict[str, Any], mysql: bool) -> dict[str, Any]:
    """``params`` as the server's statements take them: on MySQL a selection of None
    ("every one") is a flag beside a list that is never empty, and seconds are whole
    microseconds."""
    if not mysql:
        return params
    shaped = dict(params)
    for name in _SELECTIONS:
        if name in shaped:
            chosen = shaped[name]
            shaped[f"every_{name[:-1]}"] = chosen is None
            shaped[name] = [""] if not chosen else list(chosen)
    if "seconds" in shaped:
        shaped["seconds_us"] = round(float(shaped.pop("seconds")) * 1_000_000)
    return shaped
