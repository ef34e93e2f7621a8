"""Rate limits on the MySQL / MariaDB ledger: the token buckets of ``ledgerq_kinds``
(migration m0009; statements in ``metering.sql``), as PostgreSQL's ``ledgerq_pick``
meters them (migration 0014), for every caller of the one pick rule: the relay's
window and the reconciler's overdue pick (:func:`ledgerq.ledger.mysql.relay.pick`)
and the direct claim (:func:`ledgerq.ledger.mysql.claims.claim_due`).

A pick that meters, in its one transaction:

1. :func:`take`: read the kinds under a limit (``metered_kinds``), and lock their
   buckets in kind order, ``FOR UPDATE SKIP LOCKED`` (``lock_buckets``), each with
   what it holds now. With no limit in force, the one plain read is all it costs.
2. the pick's ordinary lanes leave every metered kind out (its ``excluded``
   kinds); a locked bucket's kind is picked apart (fragments.sql ``due_pick``
   for that one kind, never aged), at most its whole tokens
   (:attr:`Buckets.caps`), and the pick keeps at most that many of it
   (:func:`ledgerq.ledger.mysql.relay_pick.kept`);
3. :func:`debit`: each bucket that admitted rows is written back, less the rows
   the pick locked, before the transaction commits.

Races: two pickers (relays, direct claimers, the reconciler) never take from
one bucket at once: the second skips the bucket the first holds, and its kind
gives it nothing this time; neither waits, and, the buckets locked in one
order with SKIP LOCKED, no two deadlock. So over any span the rows admitted of
a kind are at most its burst plus its rate times the span, however many
pickers run. A kind whose limit is set between step 1's read and a task's lock
may have a row admitted through the ordinary lanes, once, as a limit set
during one of PostgreSQL's picks does.

Cost: with no limit in force, one plain read of ``ledgerq_kinds`` per pick
(0.7 ms on the development machine). With one, a bucket's lane is the pick
rule for its kind alone, read along the pick index, which has no kind: it
reads past the queue's rows of other kinds (a 20,000-row backlog: about 17 ms
more per pick). The ordinary lanes read past a limited kind's waiting rows as
they read past a paused kind's.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import TextClause

from ledgerq.ledger.mysql.answer import Answer
from ledgerq.ledger.mysql.queries import LIBRARY
from ledgerq.ledger.sql import load_in_lists


@dataclass(frozen=True)
class MeteringQueries:
    """``ledger/mysql/metering.sql``."""

    metered_kinds: TextClause
    lock_buckets: TextClause
    debit: TextClause
    kind_limits: TextClause
    set_limit: TextClause


MeQ: MeteringQueries = load_in_lists(
    MeteringQueries, "ledgerq.ledger.mysql", "metering.sql", LIBRARY
)


@dataclass(frozen=True)
class Buckets:
    """What :func:`take` found: every kind under a limit (``metered``), and the
    buckets this transaction locked, each with its tokens and the clock reading
    they were computed at."""

    metered: frozenset[str] = frozenset()
    avail: Mapping[str, float] = field(default_factory=dict)
    at: Mapping[str, datetime] = field(default_factory=dict)

    @property
    def caps(self) -> dict[str, int]:
        """How many rows of each locked bucket's kind a pick may admit."""
        return {kind: math.floor(tokens) for kind, tokens in self.avail.items()}

    def open(self) -> list[str]:
        """The locked buckets' kinds with a whole token, in kind order."""
        return [kind for kind, cap in sorted(self.caps.items()) if cap >= 1]


NONE = Buckets()


def take() -> Generator[tuple[TextClause, Mapping[str, Any]], Answer, Buckets]:
    """Step 1 (module docstring): the kinds under a limit, and the buckets locked."""
    listed = yield MeQ.metered_kinds, {}
    if not listed.rows:
        return NONE
    locked = yield MeQ.lock_buckets, {}
    return Buckets(
        frozenset(str(r[0]) for r in listed.rows) | {str(r[0]) for r in locked.rows},
        {str(r[0]): float(r[1]) for r in locked.rows},
        {str(r[0]): r[2] for r in locked.rows},
    )


def debit(
    buckets: Buckets, admitted: Counter[str]
) -> Generator[tuple[TextClause, Mapping[str, Any]], Answer, None]:
    """Step 3: each locked bucket less the rows of its kind the pick ``admitted``."""
    for kind in sorted(buckets.avail):
        if admitted[kind]:
            tokens = buckets.avail[kind] - admitted[kind]
            yield MeQ.debit, {"kind": kind, "tokens": tokens, "at": buckets.at[kind]}
