"""Rate limits per kind (issue 14): metered by the relays from a token bucket in the
ledger, so the limit holds across every relay and worker together, and the tasks
beyond it wait in the ledger (pending), not in a worker's memory."""

from __future__ import annotations

import asyncio
import time
from contextlib import AsyncExitStack
from typing import Any

import psycopg

from ledgerq import Registry, TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import libpq_url
from ledgerq.ledger.scheduling import RateLimit
from ledgerq.relay.service import RelayConfig
from tests.harness import Pipeline, Poll, enqueue_committed, subscribe_queues
from tests.support import until

RATE = 20.0
#: Limited tasks: 10 s of metering at RATE after the first burst.
LIMITED = 220


async def test_a_rate_limit_holds_across_two_relays_and_two_workers(
    settings: Settings, ledger: PgLedger
) -> None:
    """The rate is read from the ledger's own clock (each task's ``published_at``,
    where the relays meter it), not from when a busy event loop got to run a handler:
    no publication can come earlier than its token, so the limit's side of the check
    holds however loaded the machine is. The metering takes ``LIMITED / RATE`` (10 s),
    far longer than the unlimited tasks need, so they settle while it goes on."""
    starts: list[float] = []
    registry = Registry()

    @registry.task("t.charge", rate_limit=f"{RATE:g}/s")
    async def charge(payload: Any, ctx: Any) -> None:
        starts.append(time.monotonic())

    @registry.task("t.free")
    async def free(payload: Any, ctx: Any) -> None:
        pass

    limited = enqueue_committed(settings, [TaskSpec("t.charge") for _ in range(LIMITED)])
    unlimited = enqueue_committed(settings, [TaskSpec("t.free") for _ in range(200)])
    relay = RelayConfig(batch_size=50, poll_interval=0.2, confirm_timeout=5)
    stop = asyncio.Event()
    async with AsyncExitStack() as stack:
        pipes = [
            await stack.enter_async_context(Pipeline(settings, registry, relay=relay))
            for _ in range(2)
        ]
        # The workers wrote the limit at start; both relays meter by it.
        [row] = await ledger.kinds()
        assert (row["kind"], row["rate_per_s"], row["burst"]) == ("t.charge", RATE, RATE)
        loops = [asyncio.create_task(p.relay.run(stop, Poll())) for p in pipes]
        # Unlimited kinds are not held back behind the limited one: they are done
        # while the limited ones are still being metered out.
        assert set((await pipes[0].settle(unlimited, timeout=10)).values()) == {"succeeded"}
        assert len(starts) < len(limited)
        # While the limit meters, the rest waits in the ledger, not in a worker.
        waiting = await pipes[0].statuses(limited)
        assert list(waiting.values()).count("pending") > 0
        await until("every limited task ran", lambda: len(starts) == len(limited), 60)
        stop.set()
        await asyncio.gather(*loops)
    assert len(starts) == len(limited)
    published = sorted(t.published for t in await ledger.timings(limited) if t.published)
    assert len(published) == len(limited)
    # A full bucket (burst = one second's worth) at first, then RATE per second. The
    # limit is the point: never faster (tight); slower only by how late a relay came
    # for the last tokens, which a loaded machine stretches (generous lower bound).
    measured = (len(published) - RATE) / (published[-1] - published[0])
    assert measured <= 1.1 * RATE, f"{measured:.1f}/s against a limit of {RATE}/s"
    assert measured >= 0.5 * RATE, f"{measured:.1f}/s against a limit of {RATE}/s"


async def test_an_operator_limit_and_a_workers_limit_share_the_table(ledger: PgLedger) -> None:
    await ledger.set_limit("t.slow", RateLimit.parse("10/m"), actor="ops")
    assert await ledger.register_limits({"t.fast": RateLimit.parse("5/s")}) == ["t.fast"]
    # The same limit again writes nothing (a restarting worker keeps the bucket).
    assert await ledger.register_limits({"t.fast": RateLimit.parse("5/s")}) == []
    rows = {r["kind"]: (r["rate_per_s"], r["burst"]) for r in await ledger.kinds()}
    assert rows == {"t.slow": (10 / 60, 1.0), "t.fast": (5.0, 5.0)}
    await ledger.set_limit("t.slow", None, actor="ops")
    assert [r["kind"] for r in await ledger.kinds()] == ["t.fast"]  # a lifted limit
    assert [a["action"] for a in await ledger.audit()] == ["set-limit", "set-limit"]


async def test_the_reconciler_meters_rate_limited_kinds_and_leaves_held_keys_as_a_relay_does(
    settings: Settings, ledger: PgLedger
) -> None:
    """Standing in for a relay that is down, the reconciler publishes an overdue task
    only if a relay could (the one rule, ledgerq_pick): a rate-limited kind's only
    within its token bucket, which it charges as a relay does; not a keyed task with
    an earlier live task of its key."""
    # One a minute (burst 1): the bucket does not refill between the two batches.
    await ledger.set_limit("t.limited", RateLimit.parse("1/m"), actor="ops")
    limited, _over_limit, first, _second, free = enqueue_committed(
        settings,
        [
            TaskSpec("t.limited"),
            TaskSpec("t.limited"),
            TaskSpec("t.k", ordering_key="k"),
            TaskSpec("t.k", ordering_key="k"),
            TaskSpec("t.free"),
        ],
    )
    with psycopg.connect(libpq_url(settings.database_url), autocommit=True) as conn:
        conn.execute("UPDATE ledgerq_tasks SET run_at = now() - interval '1 hour'")
    await subscribe_queues(ledger, "default")  # a live window with room for all five
    async with ledger.overdue_batch(100, 60) as batch:
        # One token (burst 1): one limited task, after the aged unmetered ones.
        assert [r.id for r in batch.rows] == [first, free, limited]
        assert await batch.mark_published(batch.rows) == {first, free, limited}
    async with ledger.overdue_batch(100, 60) as batch:
        assert batch.rows == []  # the bucket is spent; "k" is held by the first
