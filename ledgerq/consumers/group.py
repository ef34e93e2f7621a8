"""Group commit for short database handlers: ``@task("kind", group_commit=True)``.

Tasks of such kinds that are claimed together run back to back in **one**
transaction: each handler writes through the shared ``ctx.session``, then one
fenced ``finish`` marks them all ``succeeded`` and one COMMIT makes the
handlers' writes and the statuses durable together. One commit (one WAL flush)
serves the whole batch instead of one per task.

If anything goes wrong - a handler raises or times out, returns a value that is
not JSON (see :mod:`.results`), or any fence was lost -
the whole transaction rolls back and every task of the batch runs again on its
own, in its own transaction, through the ordinary path; that path records the
failure, the retry or the lost fence exactly as it would have. A handler's
database writes are therefore committed at most once, with its status.

Handlers run one after another, so the option is for handlers that do a little
database work and no slow I/O; the batch is what one claim returned (at most the
worker's free slots). In a batch that falls back, a handler runs twice within
the same attempt (its first run's writes rolled back): use the option only for
handlers whose every effect is a database write through ``ctx.session``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession

from ledgerq.consumers.context import AsyncTaskContext
from ledgerq.consumers.deadline import handler_timeout
from ledgerq.consumers.registry import Handler
from ledgerq.consumers.results import encode_result
from ledgerq.ledger.model import ClaimedTask
from ledgerq.ledger.split.ids import shard_of_id
from ledgerq.ledger.within import asucceed_within

log = logging.getLogger("ledgerq.worker")


@dataclass
class GroupCommitter:
    engine: AsyncEngine
    worker: str
    default_timeout_s: float | None = None
    #: With ledger shards: the handlers' engine of each shard (``engine`` is unused).
    shard_engines: Sequence[AsyncEngine] = ()

    async def run(self, batch: Sequence[tuple[ClaimedTask, Handler]]) -> bool:
        """Run and commit the whole batch (its tasks all of one ledger shard); False
        (nothing committed) if any part failed."""
        engine = self.engine
        if self.shard_engines:
            engine = self.shard_engines[shard_of_id(batch[0][0].id)]
        async with AsyncSession(engine) as session:
            try:
                results: list[str | None] = []
                for task, handler in batch:
                    ctx = AsyncTaskContext(task, self.worker, _session=session)
                    timeout = handler_timeout(task, handler, self.default_timeout_s)
                    async with asyncio.timeout(timeout):
                        results.append(encode_result(await handler.fn(task.payload, ctx)))
                won = await asucceed_within(session, [t.fence for t, _ in batch], results)
                if len(won) != len(batch):
                    log.info(
                        "group of %d: %d fences lost; running each on its own",
                        len(batch),
                        len(batch) - len(won),
                    )
                    await session.rollback()
                    return False
                await session.commit()
                return True
            except Exception as exc:
                log.info("group of %d failed (%r); running each on its own", len(batch), exc)
                await session.rollback()
                return False
