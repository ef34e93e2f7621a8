"""The named statements of ``testing.sql`` (PostgreSQL) and ``testing_mysql.sql``
(MySQL / MariaDB), loaded as :class:`HelperQueries`, one set per server, and
:func:`helper_params`, the parameters as the chosen set takes them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.sql import load, load_in_lists

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


TQ = load(HelperQueries, "ledgerq.testing", "testing.sql")
MY_TQ = load_in_lists(HelperQueries, "ledgerq.testing", "testing_mysql.sql")


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
