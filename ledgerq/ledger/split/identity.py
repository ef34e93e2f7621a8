"""What a database says it is among the ledger shards, and the checks on it, for
either server (PostgreSQL's :mod:`ledgerq.ledger.pg.shards`, MySQL's
:mod:`ledgerq.ledger.mysql.shards` read and write it; the rules are here once).

``ledgerq migrate`` records (k, n) in each database of the list: its position k
and the list's length n. :func:`refuse_reassignment` is migrate's rule: a
database that already records another index keeps it (its task ids carry it).
:func:`check_identity` is every command's start check: the database at
position k must say (k, n). A reordered list, a database missing from it or a
wrong one is a one-line :class:`~ledgerq.core.errors.ConfigError`, never silent
misrouting. A one-database ledger that ``migrate`` never assigned passes (a
ledger migrated by Alembic directly, as some tools do).
"""

from __future__ import annotations

from ledgerq.core.errors import ConfigError, SchemaError
from ledgerq.core.masking import mask_url

#: (shard_index, shard_count) as a database records it; None: not recorded.
Identity = tuple[int, int] | None

_SETTING = "LEDGERQ_DATABASE_URL"


def refuse_reassignment(url: str, index: int, recorded: int | None) -> None:
    """Raise unless the database at ``url``, listed at position ``index``, recorded
    no shard before or the same one."""
    if recorded is not None and recorded != index:
        raise ConfigError(
            f"{_SETTING} lists {mask_url(url)} as ledger shard {index}, "
            f"but it is ledger shard {recorded} (its task ids say so): list the databases "
            "in their original order; a database never changes shard"
        )


def check_identity(url: str, identity: Identity, index: int, count: int) -> None:
    """Raise unless the database at ``url`` (position ``index`` of ``count``) says so."""
    where = mask_url(url)
    if identity is None:
        if count == 1:
            return
        raise SchemaError(
            f"{where} does not record which ledger shard it is: run `ledgerq migrate` "
            f"with the full {_SETTING} list"
        )
    if identity[0] != index:
        raise ConfigError(
            f"{_SETTING} lists {where} as ledger shard {index}, but it is ledger shard "
            f"{identity[0]} of {identity[1]}: restore the list's order (a reordered list "
            "would send tasks to the wrong database)"
        )
    if identity[1] != count:
        raise ConfigError(
            f"{_SETTING} lists {count} ledger shard(s), but {where} was migrated as shard "
            f"{index} of {identity[1]}: give every process the same list, and run "
            "`ledgerq migrate` after adding a database"
        )
