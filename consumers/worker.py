"""The worker: deliveries in, claims, handlers, terminal statuses, then acks.

Three small loops share one event loop:

* the **claimer** takes every delivery that has arrived, claims their rows in one
  compare-and-set statement, starts the winners and acks the losers (a row
  already finished, cancelled, or claimed by another worker);
* each claimed task runs in its own asyncio task (see :mod:`consumers.execute`);
* the **finisher** takes every outcome that has arrived and writes them in one
  transaction (``succeeded`` to history, retries with backoff, ``dead``), and
  only after that commit acks their deliveries.

A **heartbeat** loop extends the leases of running tasks. Acks go to the channel
the delivery came on; if that channel died, the ack is dropped, never sent on a
new channel, and the broker's redelivery is skipped because the row is terminal.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.execute import Done, TaskRunner
from consumers.registry import Registry
from ledger.alerts import AlertHook, log_alert, safe_alert
from ledger.faults import crash_point
from ledger.store import AsyncLedger, ClaimedTask, Failure, Fence
from ledger.topology import Topology
from relay.amqp import CONNECTION_ERRORS, declare, declare_queue

log = logging.getLogger("consumers.worker")


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    concurrency: int = 32
    #: Unacked deliveries the broker may push; 0 means twice the concurrency.
    prefetch: int = 0
    #: Connections handlers' ``ctx.session`` may hold at once (per kind: sync/async).
    db_pool: int = 10
    lease_s: float = 60.0
    heartbeat_s: float = 15.0
    #: On SIGTERM, how long in-flight handlers get to finish.
    grace_s: float = 30.0
    max_batch: int = 500
    worker_id: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")

    def __post_init__(self) -> None:
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        if not 1 <= self.concurrency <= 10_000:
            raise ValueError(f"concurrency must be 1..10000, got {self.concurrency}")
        if not 1 <= self.db_pool <= 1000:
            raise ValueError(f"db_pool must be 1..1000, got {self.db_pool}")
        if self.prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {self.prefetch}")
        if not 0 < self.heartbeat_s < self.lease_s:
            raise ValueError("heartbeat_s must be positive and shorter than lease_s")
        if self.grace_s < 0:
            raise ValueError("grace_s must be >= 0")

    @property
    def effective_prefetch(self) -> int:
        return self.prefetch or 2 * self.concurrency


@dataclass
class WorkerCounts:
    received: int = 0
    claimed: int = 0
    skipped: int = 0
    succeeded: int = 0
    retried: int = 0
    dead: int = 0
    rejected: int = 0


def parse_fence(body: bytes) -> Fence | None:
    """``(id, epoch)`` from a message body, or None if it is not one of ours."""
    try:
        data = json.loads(body)
        task_id, epoch = data["id"], data["epoch"]
    except (ValueError, TypeError, KeyError):
        return None
    if type(task_id) is not int or type(epoch) is not int or task_id < 1 or epoch < 0:
        return None
    return task_id, epoch


async def ack(message: AbstractIncomingMessage) -> None:
    """Ack on the delivery's own channel; if that channel is dead, drop the ack."""
    try:
        await message.ack()
    except CONNECTION_ERRORS:
        log.info(
            "delivery of %s came on a channel that is gone; not acked (the broker "
            "redelivers it and the redelivery is skipped)",
            message.message_id,
        )


class Worker:
    def __init__(
        self,
        ledger: AsyncLedger,
        registry: Registry,
        topology: Topology,
        config: WorkerConfig,
        *,
        sync_engine: Engine | None = None,
        async_engine: AsyncEngine | None = None,
        alert: AlertHook = log_alert,
    ) -> None:
        self.ledger = ledger
        self.topology = topology
        self.config = config
        self.alert = alert
        self.counts = WorkerCounts()
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="ledgerq-handler")
        self.runner = TaskRunner(
            registry,
            config.worker_id,
            self._pool,
            sync_engine,
            async_engine or ledger.engine,
            on_context=self._track_context,
        )
        self._inbox: list[tuple[Fence, AbstractIncomingMessage]] = []
        self._inbox_ready = asyncio.Event()
        self._outbox: list[tuple[ClaimedTask, Done | Failure, AbstractIncomingMessage]] = []
        self._outbox_ready = asyncio.Event()
        self._slots = asyncio.Semaphore(config.concurrency)
        self._running: dict[int, tuple[ClaimedTask, Any]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._loops: list[asyncio.Task[None]] = []
        self._queues: list[tuple[AbstractQueue, str]] = []
        self._stopping = False

    # -- lifecycle --------------------------------------------------------------
    async def start(self, connection: AbstractRobustConnection) -> None:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.config.effective_prefetch)
        exchange = await declare(channel, self.topology, ())
        for name in self.config.queues:
            queue = await declare_queue(channel, exchange, self.topology, name)
            tag = await queue.consume(self._on_message, no_ack=False)
            self._queues.append((queue, tag))
        self._loops = [
            asyncio.create_task(self._claim_loop(), name="ledgerq-claimer"),
            asyncio.create_task(self._finish_loop(), name="ledgerq-finisher"),
            asyncio.create_task(self._heartbeat_loop(), name="ledgerq-heartbeat"),
        ]
        log.info(
            "worker %s consuming %s (concurrency %d, prefetch %d)",
            self.config.worker_id,
            ", ".join(self.config.queues),
            self.config.concurrency,
            self.config.effective_prefetch,
        )

    async def stop(self) -> None:
        """Stop consuming, let in-flight handlers finish within the grace, write, ack."""
        self._stopping = True
        for queue, tag in self._queues:
            try:
                await queue.cancel(tag)
            except CONNECTION_ERRORS as exc:
                log.info("cancelling the consumer failed (%s); the channel is already gone", exc)
        self._inbox_ready.set()
        await asyncio.sleep(0)  # let the claimer take what already arrived
        if self._handlers:
            log.info(
                "draining %d in-flight tasks (grace %.0fs)",
                len(self._handlers),
                self.config.grace_s,
            )
            _, late = await asyncio.wait(self._handlers, timeout=self.config.grace_s)
            for t in late:
                t.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        await self._drain_outbox()
        for loop_task in self._loops:
            loop_task.cancel()
        await asyncio.gather(*self._loops, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker stopped: %s", self.counts)

    async def _drain_outbox(self) -> None:
        while self._outbox:
            await self._finish_batch()

    # -- deliveries -------------------------------------------------------------
    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self.counts.received += 1
        fence = parse_fence(message.body)
        if fence is None:
            self.counts.rejected += 1
            log.error(
                "rejecting a message that names no task (message_id=%r, body=%r); "
                "it goes to the dead-letter queue",
                message.message_id,
                message.body[:200],
            )
            await message.reject(requeue=False)
            return
        crash_point("worker.after_receive")
        self._inbox.append((fence, message))
        self._inbox_ready.set()

    async def _claim_loop(self) -> None:
        while True:
            await self._inbox_ready.wait()
            self._inbox_ready.clear()
            while self._inbox:
                batch = self._inbox[: self.config.max_batch]
                del self._inbox[: len(batch)]
                await self._claim_batch(batch)

    async def _claim_batch(self, batch: list[tuple[Fence, AbstractIncomingMessage]]) -> None:
        try:
            won = await self.ledger.claim(
                [f for f, _ in batch], self.config.worker_id, self.config.lease_s
            )
        except Exception:
            log.exception("claim failed; returning %d deliveries to the broker", len(batch))
            for _, message in batch:
                await _requeue(message)
            await asyncio.sleep(1.0)
            return
        by_id = {t.id: t for t in won}
        lost: list[tuple[Fence, AbstractIncomingMessage]] = []
        for fence, message in batch:
            task = by_id.pop(fence[0], None)
            if task is None:
                lost.append((fence, message))
                continue
            self.counts.claimed += 1
            self._running[task.id] = (task, None)
            handler_task = asyncio.create_task(self._execute(task, message))
            self._handlers.add(handler_task)
            handler_task.add_done_callback(self._handlers.discard)
        if lost:
            await self._skip(lost)

    async def _skip(self, lost: list[tuple[Fence, AbstractIncomingMessage]]) -> None:
        """Ack deliveries whose claim lost: the row moved on without them."""
        try:
            where = await self.ledger.whereabouts(f[0] for f, _ in lost)
        except Exception:
            where = {}
        for (task_id, epoch), message in lost:
            status = where.get(task_id)
            if status is None:
                log.warning("delivery names task %s, which is not in the ledger; acked", task_id)
            else:
                log.debug(
                    "task %s (epoch %s) is %s; duplicate delivery acked", task_id, epoch, status
                )
            self.counts.skipped += 1
            await ack(message)

    async def _execute(self, task: ClaimedTask, message: AbstractIncomingMessage) -> None:
        async with self._slots:
            try:
                outcome = await self.runner.run(task)
            except asyncio.CancelledError:
                outcome = Failure(
                    task.id,
                    task.epoch,
                    "worker shut down before the handler finished (grace period over)",
                    delay=task.retry_delay(),
                )
        if isinstance(outcome, Done) and not outcome.needs_write:
            crash_point("worker.after_commit")
            self._running.pop(task.id, None)
            if outcome.won:
                self.counts.succeeded += 1
            else:
                log.warning(
                    "task %s: fence lost before commit; the handler's writes were rolled back",
                    task.id,
                )
            await ack(message)
            return
        self._outbox.append((task, outcome, message))
        self._outbox_ready.set()

    def _track_context(self, task: ClaimedTask, ctx: Any) -> None:
        """Remember the handler's context, so a lost lease can be flagged on it."""
        self._running[task.id] = (task, ctx)

    # -- terminal writes ----------------------------------------------------------
    async def _finish_loop(self) -> None:
        while True:
            await self._outbox_ready.wait()
            self._outbox_ready.clear()
            while self._outbox:
                await self._finish_batch()

    async def _finish_batch(self) -> None:
        batch = self._outbox[: self.config.max_batch]
        del self._outbox[: len(batch)]
        done = [t.fence for t, o, _ in batch if isinstance(o, Done)]
        failures = [o for _, o, _ in batch if isinstance(o, Failure)]
        while True:
            try:
                completed = await self.ledger.complete(done)
                failed = await self.ledger.fail(failures)
                break
            except Exception:
                log.exception("writing %d outcomes failed; retrying", len(batch))
                await asyncio.sleep(1.0)
        crash_point("worker.after_commit")
        self.counts.succeeded += len(completed)
        for outcome in failed:
            if outcome.status == "dead":
                self.counts.dead += 1
                safe_alert(self.alert, outcome)
            else:
                self.counts.retried += 1
        for task, _, message in batch:
            self._running.pop(task.id, None)
            await ack(message)

    # -- leases -------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            if not self._running:
                continue
            snapshot = dict(self._running)
            try:
                held = await self.ledger.heartbeat(
                    (t.fence for t, _ in snapshot.values()), self.config.lease_s
                )
            except Exception:
                log.exception("heartbeat failed; leases may lapse")
                continue
            for task_id, (_, ctx) in snapshot.items():
                if task_id not in held and task_id in self._running and ctx is not None:
                    log.warning(
                        "task %s lost its lease (cancelled or rescued); its writes will not commit",
                        task_id,
                    )
                    ctx.lost = True


async def _requeue(message: AbstractIncomingMessage) -> None:
    try:
        await message.reject(requeue=True)
    except CONNECTION_ERRORS:
        log.info(
            "could not requeue %s: its channel is gone (the broker redelivers it)",
            message.message_id,
        )
