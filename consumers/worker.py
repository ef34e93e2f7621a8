"""The worker: deliveries in, claims, handlers, terminal statuses, then acks.

Three small loops share one event loop:

* the **claimer** takes the deliveries that have arrived, as many as there are
  free handler slots, claims their rows in one compare-and-set statement, starts
  the winners and acks the losers (a row already finished, cancelled, or claimed
  by another worker). A delivery waits unclaimed until a slot is free, so no
  attempt is counted for a task that has not started;
* each claimed task runs in its own asyncio task (see :mod:`consumers.execute`);
* the **finisher** takes every outcome that has arrived and writes them in one
  round trip per kind (``succeeded`` to history; retries with backoff or
  ``dead``), and only after that commit hands the deliveries to the acker.

A **heartbeat** loop extends the leases of running tasks. Acks go to the channel
the delivery came on; if that channel died the ack is dropped, never sent on a
new channel, and the broker's redelivery is skipped because the row moved on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import time
from collections import deque
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
from sqlalchemy.ext.asyncio import AsyncEngine

from consumers.acker import Acker
from consumers.execute import Done, Outcome, TaskRunner, clean_error
from consumers.group import GroupCommitter
from consumers.registry import Handler, Registry
from ledger.alerts import AlertHook, log_alert, safe_alert
from ledger.faults import crash_point
from ledger.store import AsyncLedger, ClaimedTask, FailOutcome, Failure, Fence
from ledger.topology import Topology
from ledger.validation import check_name
from relay.amqp import CONNECTION_ERRORS, declare, declare_queue

if TYPE_CHECKING:  # the broker client is the adapters' business (relay.amqp)
    from aio_pika.abc import AbstractIncomingMessage, AbstractQueue, AbstractRobustConnection

    Entry = tuple[ClaimedTask, Outcome, AbstractIncomingMessage]

log = logging.getLogger("consumers.worker")

MAX_BIGINT = 2**63 - 1


@dataclass(frozen=True)
class WorkerConfig:
    queues: tuple[str, ...] = ("default",)
    #: Handlers running at once (async tasks on the loop, or threads for sync ones).
    concurrency: int = 100
    #: Unacked deliveries the broker may push; 0 means twice the concurrency.
    prefetch: int = 0
    #: Connections handlers' ``ctx.session`` may hold at once (per kind: sync/async).
    db_pool: int = 10
    lease_s: float = 60.0
    heartbeat_s: float = 15.0
    #: On SIGTERM, how long in-flight handlers get to finish.
    grace_s: float = 30.0
    #: A handler with no timeout of its own (task or @task option) gets this one,
    #: so a task that always hangs still ends ``dead`` after its attempts.
    default_timeout_s: float | None = 1800.0
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
        if self.default_timeout_s is not None and self.default_timeout_s <= 0:
            raise ValueError("default_timeout_s must be positive (or None for no limit)")
        for name in self.queues:
            check_name(name, "queue")

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
    if type(task_id) is not int or type(epoch) is not int:
        return None
    if not (1 <= task_id <= MAX_BIGINT and 0 <= epoch <= MAX_BIGINT):
        return None
    return task_id, epoch


def _transient(exc: BaseException) -> bool:
    """A database error worth retrying as it is (the connection, not the data)."""
    if not isinstance(exc, DBAPIError):
        return True
    return exc.connection_invalidated or isinstance(exc, OperationalError | InterfaceError)


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
        self.acker = Acker(max_waiting=max(8, config.effective_prefetch // 4))
        self._pool = ThreadPoolExecutor(config.concurrency, thread_name_prefix="ledgerq-handler")
        self.runner = TaskRunner(
            registry,
            config.worker_id,
            self._pool,
            sync_engine,
            async_engine or ledger.engine,
            on_context=self._track_context,
            default_timeout_s=config.default_timeout_s,
        )
        self.registry = registry
        self.group = GroupCommitter(
            async_engine or ledger.engine, config.worker_id, config.default_timeout_s
        )
        self._free = config.concurrency
        self._inbox: deque[tuple[Fence, AbstractIncomingMessage]] = deque()
        self._claimer_wake = asyncio.Event()
        self._outbox: list[Entry] = []
        self._finisher_wake = asyncio.Event()
        self._running: dict[Fence, tuple[ClaimedTask, Any]] = {}
        self._handlers: set[asyncio.Task[None]] = set()
        self._claimer: asyncio.Task[None] | None = None
        self._finisher: asyncio.Task[None] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self._queues: list[tuple[AbstractQueue, str]] = []
        self._stopping = False
        self._drained = False
        self._stop_started = 0.0
        self._alerts: set[asyncio.Task[None]] = set()

    # -- lifecycle --------------------------------------------------------------
    async def start(self, connection: AbstractRobustConnection) -> None:
        channel = await connection.channel()
        await channel.set_qos(prefetch_count=self.config.effective_prefetch)
        exchange = await declare(channel, self.topology, ())
        for name in self.config.queues:
            queue = await declare_queue(channel, exchange, self.topology, name)
            tag = await queue.consume(self._on_message, no_ack=False)
            self._queues.append((queue, tag))
        self._claimer = asyncio.create_task(self._claim_loop(), name="ledgerq-claimer")
        self._finisher = asyncio.create_task(self._finish_loop(), name="ledgerq-finisher")
        self._heartbeat = asyncio.create_task(self._heartbeat_loop(), name="ledgerq-heartbeat")
        log.info(
            "worker %s consuming %s (concurrency %d, prefetch %d)",
            self.config.worker_id,
            ", ".join(self.config.queues),
            self.config.concurrency,
            self.config.effective_prefetch,
        )

    async def stop(self) -> None:
        """Stop consuming and claiming; let in-flight handlers finish within the grace;
        write their outcomes; ack. Unclaimed deliveries stay unacked (the broker
        requeues them when the channel closes)."""
        self._stopping = True
        self._stop_started = time.monotonic()
        for queue, tag in self._queues:
            try:
                await queue.cancel(tag)
            except CONNECTION_ERRORS as exc:
                log.info("cancelling the consumer failed (%s); the channel is already gone", exc)
        self._claimer_wake.set()
        if self._claimer is not None:  # it finishes the claim in flight, then stops
            await asyncio.gather(self._claimer, return_exceptions=True)
        if self._handlers:
            log.info(
                "draining %d in-flight tasks (grace %.0fs)",
                len(self._handlers),
                self.config.grace_s,
            )
            _, late = await asyncio.wait(set(self._handlers), timeout=self.config.grace_s)
            for task in late:
                task.cancel()
            await asyncio.gather(*late, return_exceptions=True)
        self._drained = True  # no handler can produce an outcome any more
        self._finisher_wake.set()
        if self._finisher is not None:
            await self._finisher  # it exits once every outcome is written and acked
        if self._alerts:
            await asyncio.wait(set(self._alerts), timeout=10)
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        self._pool.shutdown(wait=False, cancel_futures=True)
        log.info("worker stopped: %s (%d acks sent)", self.counts, self.acker.acks_sent)

    # -- deliveries -------------------------------------------------------------
    async def _on_message(self, message: AbstractIncomingMessage) -> None:
        self.counts.received += 1
        self.acker.received(message)
        fence = parse_fence(message.body)
        if fence is None:
            self.counts.rejected += 1
            log.error(
                "rejecting a message that names no task (message_id=%r, body=%r); "
                "it goes to the dead-letter queue",
                message.message_id,
                message.body[:200],
            )
            await self.acker.reject([message], requeue=False)
            return
        crash_point("worker.after_receive")
        self._inbox.append((fence, message))
        self._claimer_wake.set()

    async def _claim_loop(self) -> None:
        while not self._stopping:
            await self._claimer_wake.wait()
            self._claimer_wake.clear()
            while self._inbox and self._free > 0 and not self._stopping:
                take = min(self._free, self.config.max_batch, len(self._inbox))
                batch = [self._inbox.popleft() for _ in range(take)]
                self._free -= take
                try:
                    await self._claim_batch(batch)
                except Exception:  # a bug of ours must not stop the claimer
                    log.exception("claim batch failed unexpectedly")

    async def _claim_batch(self, batch: list[tuple[Fence, AbstractIncomingMessage]]) -> None:
        try:
            won = await self.ledger.claim(
                [f for f, _ in batch], self.config.worker_id, self.config.lease_s
            )
        except Exception:
            log.exception("claim failed; returning %d deliveries to the broker", len(batch))
            self._free += len(batch)
            await self.acker.reject([m for _, m in batch], requeue=True)
            await asyncio.sleep(1.0)
            return
        # A claim bumps the epoch: the delivery that won carried epoch - 1. Matching
        # by (id, epoch) keeps a stale duplicate in the same batch from taking the
        # winner's place (and the winner's delivery from being acked early).
        by_fence = {(t.id, t.epoch - 1): t for t in won}
        lost: list[tuple[Fence, AbstractIncomingMessage]] = []
        grouped: list[tuple[ClaimedTask, Handler, AbstractIncomingMessage]] = []
        for fence, message in batch:
            task = by_fence.pop(fence, None)
            if task is None:
                lost.append((fence, message))
                continue
            self.counts.claimed += 1
            self._running[task.fence] = (task, None)
            handler = self.registry.get(task.kind)
            if handler is not None and handler.group_commit:
                grouped.append((task, handler, message))
            else:
                self._spawn(self._execute(task, message))
        if grouped:
            self._spawn(self._execute_group(grouped))
        if lost:
            self._free += len(lost)
            await self._skip(lost)

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        handler_task = asyncio.create_task(coro)
        self._handlers.add(handler_task)
        handler_task.add_done_callback(self._handler_done)

    async def _execute_group(
        self, grouped: list[tuple[ClaimedTask, Handler, AbstractIncomingMessage]]
    ) -> None:
        """Group-commit kinds: one transaction for the batch, else each on its own."""
        try:
            committed = await self.group.run([(t, h) for t, h, _ in grouped])
        except Exception:
            log.exception("group commit failed unexpectedly; running each task on its own")
            committed = False
        except asyncio.CancelledError:  # shutdown's grace ran out: nothing was committed
            for task, _, message in grouped:
                self._release_slot()
                shutdown = Failure(
                    task.id,
                    task.epoch,
                    "worker shut down before the handler finished (grace period over)",
                )
                self._outbox.append((task, shutdown, message))
            self._finisher_wake.set()
            return
        if not committed:
            await asyncio.gather(*(self._execute(t, m) for t, _, m in grouped))
            return
        crash_point("worker.after_commit")
        self.counts.succeeded += len(grouped)
        for task, _, _ in grouped:
            self._running.pop(task.fence, None)
            self._release_slot()
        await self.acker.finished([m for _, _, m in grouped])

    async def _skip(self, lost: list[tuple[Fence, AbstractIncomingMessage]]) -> None:
        """Ack deliveries whose claim lost: the row moved on without them."""
        try:
            where = await self.ledger.whereabouts(f[0] for f, _ in lost)
        except Exception:
            where = {}
        for (task_id, epoch), _ in lost:
            status = where.get(task_id)
            if status is None:
                log.warning("delivery names task %s, which is not in the ledger; acked", task_id)
            else:
                log.debug("task %s (epoch %s) is %s; stale delivery acked", task_id, epoch, status)
        self.counts.skipped += len(lost)
        await self.acker.finished([m for _, m in lost])

    def _release_slot(self) -> None:
        self._free += 1
        self._claimer_wake.set()

    async def _execute(self, task: ClaimedTask, message: AbstractIncomingMessage) -> None:
        try:
            outcome = await self.runner.run(task, self._release_slot)
        except asyncio.CancelledError:
            outcome = Failure(
                task.id,
                task.epoch,
                "worker shut down before the handler finished (grace period over)",
                delay=0.0,
            )
        except Exception as exc:  # a bug of ours: record it, never lose the task
            log.exception("running task %s failed unexpectedly", task.id)
            outcome = Failure(
                task.id, task.epoch, clean_error(f"worker error: {exc!r}"), final=True
            )
        if isinstance(outcome, Done) and not outcome.needs_write:
            crash_point("worker.after_commit")
            if outcome.won:
                self.counts.succeeded += 1
            else:
                log.warning(
                    "task %s: fence lost before commit; the handler's writes were rolled back",
                    task.id,
                )
            self._running.pop(task.fence, None)
            await self.acker.finished([message])
            return
        self._outbox.append((task, outcome, message))
        self._finisher_wake.set()

    def _handler_done(self, task: asyncio.Task[None]) -> None:
        self._handlers.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("handler task ended with %r", task.exception())

    def _track_context(self, task: ClaimedTask, ctx: Any) -> None:
        """Remember the handler's context, so a lost lease can be flagged on it."""
        self._running[task.fence] = (task, ctx)

    # -- terminal writes ----------------------------------------------------------
    async def _finish_loop(self) -> None:
        while True:
            await self._finisher_wake.wait()
            self._finisher_wake.clear()
            while self._outbox:
                batch = self._outbox[: self.config.max_batch]
                del self._outbox[: len(batch)]
                try:
                    await self._finish_batch(batch)
                except Exception:  # a bug of ours must not stop the finisher
                    log.exception(
                        "finishing %d outcomes failed unexpectedly; returning them to the broker",
                        len(batch),
                    )
                    await self._give_back(batch)
            if self._drained and not self._outbox:
                return

    async def _finish_batch(self, batch: list[Entry]) -> None:
        done = [t.fence for t, o, _ in batch if isinstance(o, Done)]
        failures = [o for _, o, _ in batch if isinstance(o, Failure)]
        completed: set[int] = set()
        failed: list[FailOutcome] = []
        while True:
            try:
                if done:
                    completed |= await self.ledger.complete(done)
                    done = []  # committed: a retry below must not write it again
                failed = await self.ledger.fail(failures)
                break
            except Exception as exc:
                past_grace = self._stopping and (
                    time.monotonic() - self._stop_started > self.config.grace_s
                )
                if not _transient(exc) or past_grace:
                    log.exception(
                        "writing %d outcomes failed and will not succeed now; "
                        "returning them to the broker: their leases lapse and the "
                        "reconciler retries them",
                        len(batch),
                    )
                    await self._give_back(batch)
                    return
                log.warning("writing %d outcomes failed (%s); retrying", len(batch), exc)
                await asyncio.sleep(1.0)
        crash_point("worker.after_commit")
        self.counts.succeeded += len(completed)
        for outcome in failed:
            if outcome.status == "dead":
                self.counts.dead += 1
                self._alert_later(outcome)
            else:
                self.counts.retried += 1
        for task, _, _ in batch:
            self._running.pop(task.fence, None)
        await self.acker.finished([m for _, _, m in batch])

    async def _give_back(self, batch: list[Entry]) -> None:
        """Outcomes that cannot be written: stop heartbeating them (their leases
        lapse and the reconciler retries them) and requeue their deliveries."""
        for task, _, message in batch:
            self._running.pop(task.fence, None)
        await self.acker.reject([m for _, _, m in batch], requeue=True)

    def _alert_later(self, outcome: FailOutcome) -> None:
        """Alert in a thread, in the background: a slow webhook holds up neither the
        loop (heartbeats) nor the finisher (acks, later outcomes)."""
        alert = asyncio.create_task(asyncio.to_thread(safe_alert, self.alert, outcome))
        self._alerts.add(alert)
        alert.add_done_callback(self._alerts.discard)

    # -- leases -------------------------------------------------------------------
    async def _heartbeat_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.heartbeat_s)
            if not self._running:
                continue
            snapshot = dict(self._running)
            try:
                held = await self.ledger.heartbeat(snapshot, self.config.lease_s)
            except Exception:
                log.exception("heartbeat failed; leases may lapse")
                continue
            for fence, (_, ctx) in snapshot.items():
                if fence[0] not in held and fence in self._running and ctx is not None:
                    log.warning(
                        "task %s lost its lease (rescued by the reconciler); its writes "
                        "will not commit",
                        fence[0],
                    )
                    ctx.lost = True
