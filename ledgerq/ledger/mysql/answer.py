"""What one statement of a MySQL ledger plan answered (:class:`Answer`): the value
every runner hands back, SQLAlchemy's (:mod:`.plans`) and a raw DB-API
connection's (:mod:`.raw`), kept apart from both so neither imports the other."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """What one statement answered: its rows, the rows it reported, the id it inserted."""

    rows: Sequence[Sequence[Any]]
    count: int
    last_id: int | None
