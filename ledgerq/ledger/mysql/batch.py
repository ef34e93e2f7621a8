"""``batch.sql`` of the MySQL ledger, loaded into :class:`MyBatchQueries` (as
:mod:`ledgerq.ledger.mysql.queries` loads ``queries.sql``, IN lists expanding), and
what ``enqueue_many``'s batched insert sends: which tasks go in one statement
(:func:`batchable`, :func:`runs`) and the batch as the statement's JSON
(:func:`rows_json`).

Contract: a batch holds only tasks without a de-duplication key (``unique`` and
``once`` take the single insert, which meets duplicates), keeps the input order,
and stays under :data:`MAX_ROWS` rows and about :data:`MAX_BYTES` of JSON (one
statement is one packet: MySQL's ``max_allowed_packet``, 16 MiB by default on
MariaDB, bounds it). Values travel inside one bound JSON parameter, never spliced
into the SQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import TextClause, text

from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.sql import load_in_lists

#: A batch's bounds: rows, and bytes of JSON (payloads included).
MAX_ROWS = 1000
MAX_BYTES = 4 * 1024 * 1024
#: What a batch row carries of insert_task's parameters (the rest is fixed: no
#: dedupe_key in a batch: ledger/mysql/inserts.py). A batch goes in input order,
#: so the tasks of one ordering key are in line by id as the single inserts
#: would put them.
_FIELDS = (
    "kind",
    "queue",
    "payload",
    "business_key",
    "priority",
    "shard",
    "run_at",
    "delay_us",
    "max_attempts",
    "retry",
    "timeout_s",
    "parent_id",
    "trace_context",
    "ordering_key",
    "expires_at",
    "expires_us",
    "tags",
)


@dataclass(frozen=True)
class MyBatchQueries:
    """``ledger/mysql/batch.sql``."""

    server_batch_ids: TextClause
    insert_task_rows: TextClause
    shard_task_rows: TextClause


MB: MyBatchQueries = load_in_lists(MyBatchQueries, "ledgerq.ledger.mysql", "batch.sql", LIBRARY)
#: insert_task_rows with its ids returned (MariaDB), for a server whose lock mode
#: does not make one statement's ids consecutive.
INSERT_RETURNING = text(MB.insert_task_rows.text + "\nRETURNING id")


@dataclass(frozen=True)
class IdsBack:
    """How the server gives a batch's ids back (``server_batch_ids``)."""

    consecutive: bool
    returning: bool
    step: int

    @property
    def batches(self) -> bool:
        return self.consecutive or self.returning


def batchable(params: Mapping[str, Any]) -> bool:
    """Whether a task (insert_task's parameters) may go in a batch: no key to meet a
    duplicate on."""
    return not params["once"] and params["dedupe_key"] is None


def _row(params: Mapping[str, Any]) -> dict[str, Any]:
    row = {name: params[name] for name in _FIELDS if params[name] is not None}
    for name in ("run_at", "expires_at"):
        at = row.get(name)
        if isinstance(at, datetime):  # naive UTC (insert_params): DATETIME(6)'s text
            row[name] = at.strftime("%Y-%m-%d %H:%M:%S.%f")
    return row


def _size(params: Mapping[str, Any]) -> int:
    """About the bytes a task adds to a batch (its payload dominates)."""
    texts = (params["payload"], params["retry"], params["trace_context"], params["tags"])
    return 256 + sum(len(t) for t in texts if t is not None)


def runs(rows: Sequence[dict[str, Any]]) -> Iterator[tuple[bool, list[dict[str, Any]]]]:
    """``rows`` (insert_task's parameters) in order, as runs: (True, a batch of
    batchable tasks within the bounds) or (False, one task for the single insert)."""
    batch: list[dict[str, Any]] = []
    size = 0
    for params in rows:
        if not batchable(params):
            if batch:
                yield True, batch
                batch, size = [], 0
            yield False, [params]
            continue
        if batch and (len(batch) >= MAX_ROWS or size + _size(params) > MAX_BYTES):
            yield True, batch
            batch, size = [], 0
        batch.append(params)
        size += _size(params)
    if batch:
        yield True, batch


def rows_json(batch: Sequence[Mapping[str, Any]]) -> str:
    """The batch as insert_task_rows' :rows (UTF-8 kept as is: the server reads the
    JSON's strings back exactly)."""
    return json.dumps([_row(p) for p in batch], ensure_ascii=False, separators=(",", ":"))
