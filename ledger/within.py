"""The terminal status, written inside a transaction the handler owns.

A handler that writes through ``ctx.session`` has its writes and its
``succeeded`` committed together: the worker runs the same fenced ``finish``
statement as everyone else, on the handler's own session, before the commit. A
lost fence returns nothing, and the caller rolls the handler's writes back.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession
from sqlalchemy.orm import Session

from ledgerq.ledger.model import Fence, Outcome
from ledgerq.ledger.params import outcome_params
from ledgerq.ledger.sql import Q


def succeed_within(session: Session | Connection, fence: Fence, result: str | None = None) -> bool:
    """running -> succeeded (with the handler's JSON ``result``) in the caller's (sync)
    transaction; whether the fence held."""
    params = outcome_params([Outcome.succeeded(fence, result)])
    return session.execute(Q.finish, params).first() is not None


async def asucceed_within(
    session: AsyncSession | AsyncConnection,
    fences: Sequence[Fence],
    results: Sequence[str | None] | None = None,
) -> set[int]:
    """running -> succeeded for ``fences`` (with each handler's JSON result, in the
    same order) in the caller's (async) transaction; the ids whose fence held."""
    values = results if results is not None else [None] * len(fences)
    params = outcome_params([Outcome.succeeded(f, r) for f, r in zip(fences, values, strict=True)])
    return {int(r[0]) for r in await session.execute(Q.finish, params)}
