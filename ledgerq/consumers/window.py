"""One batched window: several claimed tasks' handlers in one transaction, a
savepoint each, one COMMIT (:mod:`.batch` decides which tasks and when).

* The window first locks its tasks' rows under their fences (``lock_running``,
  SKIP LOCKED); until its COMMIT no one else can move them (the reconciler, a
  cancel, a heartbeat wait for it), so its fenced finish wins for every row it
  locked. A task whose row it could not lock (busy at that instant, or its fence
  already lost) is not run in the window: it takes the ordinary path
  (``fallback``), whose own fenced finish settles which it was.
* Before each handler the window begins a SAVEPOINT (``HandlerMarks``: one name,
  sent on the driver's connection, so no statement is compiled per task), and
  the handler's ``ctx.session`` joins the window's transaction
  (``join_transaction_mode="rollback_only"``, see :mod:`.context`: the session's
  commit only flushes). One session serves the window's handlers in turn while
  they succeed, emptied (``expunge_all``) between them: no ORM object of one
  handler is seen by the next. After a failure the next handler gets a new one.
  The handler's writes are undone alone (ROLLBACK TO SAVEPOINT) when it raises,
  times out, is cancelled or returns a value that cannot be stored, and that
  task's outcome goes to the finisher like any failure. One handler's failure
  never undoes another's writes. The handlers' savepoints nest in one opened
  after the lock and are released all at once before the finish (a round trip
  saved per task), so the finish runs in the transaction that locked the rows
  (``open_handlers`` in queries.sql says why that matters); ``max_tasks`` stays
  below 64, PostgreSQL's per-backend cache of subtransaction ids. A handler that
  rolls its session back itself (or whose ORM flush fails: SQLAlchemy then rolls
  the session back) rolls back the window's transaction: the window cannot go
  on, so the whole window is rolled back (:class:`SelfRolledBackError`) and its
  kind leaves windows for ``cooldown_s``.
* After the handlers, one ``finish`` statement marks the window's successes
  ``succeeded`` and one COMMIT makes their writes and their statuses durable
  together (one WAL flush for the window). Only then are they handed to the
  finisher, which acks them.
* A window that fails as a whole (that rollback, a failed statement or COMMIT,
  a lost connection) committed nothing, and no single task is to blame: its
  tasks run again on the ordinary path, each in its own transaction, with no
  attempt counted. The one at fault (a deferred constraint, say) then fails
  alone; the others commit. Their handlers have run twice, as after any
  retry; their writes commit once. (If the COMMIT did reach the server before
  the connection died, the rows moved on, and each re-run's fenced finish
  loses and rolls its writes back.)

Races: a sync handler that outlives its timeout in a window cannot be stopped.
The worker waits for the handler running in the window up to that handler's
own timeout plus a margin (``margin_s``), then abandons the window: it
ends the window's transaction from another connection (``end_window``:
terminating the backend rolls it back and releases its row locks now, so no
heartbeat, cancel or reconciler waits for the hung thread), sends the tasks the
window ran before it to the ordinary path, uncharged (their handlers have
returned); those it had not reached go back to the queue. The hung task is
recorded as timed out only once its thread has returned (its lease kept
meanwhile, the hard cap of :mod:`.hung` armed), so its retry never overlaps
it. The thread and the loop agree on which tasks the window took under one
lock (:class:`WindowState`); once abandoned, the thread starts no other handler.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledgerq.consumers.context import AsyncTaskContext, HandlerContext, TaskContext
from ledgerq.consumers.execute import TaskRunner, _returned, failure, handler_timeout
from ledgerq.consumers.registry import Handler
from ledgerq.consumers.window_items import (
    NOT_LOCKED,
    Item,
    NotLocked,
    Ran,
    SelfRolledBackError,
    WindowState,
    check_own,
    emptied,
    report_all,
    successes,
    unflushed,
)
from ledgerq.core.logs import current_task
from ledgerq.ledger.model import ClaimedTask
from ledgerq.ledger.within import (
    AsyncHandlerMarks,
    HandlerMarks,
    alock_within,
    asucceed_within,
    end_window,
    lock_within,
    succeed_many_within,
)

if TYPE_CHECKING:
    from ledgerq.consumers.batch import BatchConfig

log = logging.getLogger("ledgerq.worker")
_Started = tuple[float, contextvars.Token[tuple[int, str, int] | None]]


@dataclass
class Windows:
    """Runs windows of items and reports every item of them (module docstring);
    ``demote(kind)`` sends a kind to the ordinary path for a while."""

    runner: TaskRunner
    config: BatchConfig
    sync_engine: Engine | None
    async_engine: AsyncEngine | None
    demote: Callable[[str], None]
    #: Windows committed, tasks run in them, tasks sent to the ordinary path.
    windows: int = 0
    batched: int = 0
    fell_back: int = 0

    # -- async handlers, on the loop ---------------------------------------------
    async def run_async(self, items: list[Item]) -> int:
        assert self.async_engine is not None
        state = WindowState()
        try:
            async with self.async_engine.connect() as conn:
                await conn.begin()
                held = await alock_within(conn, [i.task.fence for i in items])
                marks = await AsyncHandlerMarks.open(conn)
                for item in self._admitted(items, held.ids, state):
                    state.done(await self._run_async(item.task, item.handler, conn, marks, state))
                await marks.close()
                ok = successes(state.taken, state.ran)
                won = await asucceed_within(conn, [t.fence for t, _ in ok], [r for _, r in ok])
                committed = len(won) == len(ok)
                if committed:
                    await conn.commit()
                else:
                    await conn.rollback()
        except Exception as exc:  # nothing of the window was committed
            return self._window_failed(items, state, exc)
        self._count(state, committed)
        return len(state.taken)

    async def _run_async(
        self,
        task: ClaimedTask,
        handler: Handler,
        conn: AsyncConnection,
        marks: AsyncHandlerMarks,
        state: WindowState,
    ) -> Ran:
        """One async handler in the window: its savepoint is begun here and never
        released (a round trip saved; ``max_tasks`` keeps them under 64). The
        session joins the window's transaction ("rollback_only": its commit only
        flushes, its rollback ends the window: :class:`SelfRolledBackError`)."""
        timeout = handler_timeout(task, handler, self.runner.default_timeout_s)
        await marks.mark()
        ctx = AsyncTaskContext(
            task, self.runner.worker, _bind=conn, _join="rollback_only", _session=state.session
        )
        state.session = None
        started = self._begin(task, ctx)
        try:
            try:
                async with asyncio.timeout(timeout):
                    value = await handler.fn(task.payload, ctx)
                result = _returned(value, ctx)
                session = ctx._session
                if session is not None and unflushed(session.sync_session):
                    await session.flush()  # ORM objects; no COMMIT, no RELEASE
                check_own(marks)
                if session is not None:
                    emptied(session.sync_session)
                    state.session = session
                return result
            except TimeoutError:
                check_own(marks)
                await marks.undo()
                return self.runner._timed_out(task, timeout, ctx)
            except SelfRolledBackError:
                raise
            except Exception as exc:
                check_own(marks)
                await marks.undo()
                return self.runner._failed(task, exc, ctx)
        finally:
            # No session.close(): "rollback_only" leaves the connection alone, and a
            # session that is not handed on holds nothing else worth a greenlet hop.
            self._end(task, started, ctx)

    # -- sync handlers, one pool thread per window -------------------------------
    async def run_sync(self, items: list[Item]) -> int:
        state = WindowState()
        future = asyncio.get_running_loop().run_in_executor(
            self.runner.pool, contextvars.copy_context().run, self._sync_thread, items, state
        )
        try:
            while not (await asyncio.wait({future}, timeout=min(self._left(state), 1.0)))[0]:
                if self._left(state) <= 0:
                    return await self._abandon(state, future)
            committed = future.result()
        except asyncio.CancelledError:  # shutdown: end the window, report nothing
            await self._abandon(state, future, report=False)
            raise
        except Exception as exc:  # nothing of the window was committed
            return self._window_failed(items, state, exc)
        self._count(state, committed)
        return len(state.taken)

    def _left(self, state: WindowState) -> float:
        """Seconds until the handler running in a sync window has outlived its own
        timeout plus the margin (infinite if none runs: the window's own statements
        are bounded by statement_timeout and the pool's timeout)."""
        with state.lock:
            running = state.running
        if running is None:
            return math.inf
        item, since = running
        limit = handler_timeout(item.task, item.handler, self.runner.default_timeout_s)
        return (
            math.inf if limit is None else since + limit + self.config.margin_s - time.monotonic()
        )

    async def _abandon(
        self, state: WindowState, future: asyncio.Future[bool], *, report: bool = True
    ) -> int:
        """Give up on a sync window whose handler outlived its timeout (module docstring)."""
        with state.lock:
            state.abandoned = True
            taken, ran, running = list(state.taken), list(state.ran), state.running
            if running is not None and state.ctx is not None and state.ctx.task is running[0].task:
                state.ctx.lost = True  # the hung handler may look, and stop
        # Once its transaction is ended the thread's next statement fails: nobody's error.
        future.add_done_callback(lambda f: f.cancelled() or f.exception())
        if state.holder is not None and self.sync_engine is not None:
            try:
                await asyncio.to_thread(end_window, self.sync_engine, state.holder)
            except Exception as exc:  # it ends at idle_in_transaction_session_timeout
                log.warning("could not end an abandoned batched window: %r", exc)
        if not report:
            return len(taken)
        for item in taken[: len(ran)]:
            item.fallback()
        if running is not None:
            item, since = running
            limit = handler_timeout(item.task, item.handler, self.runner.default_timeout_s)
            log.warning(
                "task %s outlived its timeout in a batched window; abandoned (its retry "
                "waits for its thread)",
                item.task.id,
            )
            self.demote(item.task.kind)
            timed_out = failure(item.task, f"timed out after {limit} s (in a batched window)")
            self.runner.hung.watch(item.task, future, since + (limit or 0.0))
            future.add_done_callback(lambda _: item.report(timed_out))
        return len(taken)

    def _sync_thread(self, items: list[Item], state: WindowState) -> bool:
        """In a pool thread: the window; whether it committed. ``state`` fills as it goes."""
        assert self.sync_engine is not None
        with self.sync_engine.connect() as conn:
            conn.begin()
            held = lock_within(conn, [i.task.fence for i in items])
            state.holder = held.holder
            marks = HandlerMarks(conn)
            for item in self._admitted(items, held.ids, state):
                state.done(self._run_sync(item.task, item.handler, conn, marks, state))
            marks.close()
            ok = successes(state.taken, state.ran)
            won = succeed_many_within(conn, [t.fence for t, _ in ok], [r for _, r in ok])
            with state.lock:
                committed = len(won) == len(ok) and not state.abandoned
            if committed:
                conn.commit()
            else:
                conn.rollback()
        return committed

    def _run_sync(
        self,
        task: ClaimedTask,
        handler: Handler,
        conn: Connection,
        marks: HandlerMarks,
        state: WindowState,
    ) -> Ran:
        """One sync handler in the window (in its thread), as :meth:`_run_async`."""
        timeout = handler_timeout(task, handler, self.runner.default_timeout_s)
        marks.mark()
        ctx = TaskContext(
            task, self.runner.worker, _bind=conn, _join="rollback_only", _session=state.session
        )
        state.session = None
        state.ctx = ctx
        started = self._begin(task, ctx)
        self.runner.in_threads.add(task.fence)
        try:
            try:
                result = _returned(handler.fn(task.payload, ctx), ctx)
                session = ctx._session
                if session is not None and unflushed(session):
                    session.flush()  # ORM objects; no COMMIT, no RELEASE
                check_own(marks)
                if timeout is not None and time.perf_counter() - started[0] > timeout:
                    marks.undo()
                    return self.runner._timed_out(task, timeout, ctx)
                if session is not None:
                    emptied(session)
                    state.session = session
                return result
            except SelfRolledBackError:
                raise
            except Exception as exc:
                check_own(marks)
                marks.undo()
                return self.runner._failed(task, exc, ctx)
        finally:
            # No session.close(): "rollback_only" leaves the connection alone, and a
            # session that is not handed on holds nothing else worth closing.
            self.runner.in_threads.discard(task.fence)
            self._end(task, started, ctx)

    # -- shared ------------------------------------------------------------------
    def _admitted(self, items: list[Item], held: set[int], state: WindowState) -> Iterator[Item]:
        """The items to run in this window, in order, until it closes (``window_s``
        after it opened, or abandoned). Each item it takes goes to ``state.taken``
        (and becomes ``state.running``); one whose row the window did not lock is
        recorded NOT_LOCKED instead of run."""
        opened = time.monotonic()
        for item in items:
            with state.lock:
                late = bool(state.taken) and time.monotonic() - opened > self.config.window_s
                if late or state.abandoned:
                    return
                state.taken.append(item)
                if item.task.id not in held:
                    state.ran.append(NOT_LOCKED)
                    continue
                state.running = (item, time.monotonic())
            yield item

    def _count(self, state: WindowState, committed: bool) -> None:
        """Report the window's tasks, and count it."""
        self.windows += 1
        self.fell_back += sum(isinstance(r, NotLocked) for r in state.ran)
        self.batched += len(state.taken)
        report_all(state.taken, state.ran, committed)

    def _window_failed(self, items: list[Item], state: WindowState, exc: Exception) -> int:
        """A window failed before or at its COMMIT: nothing of it was committed, and
        its tasks take the ordinary path, uncharged (module docstring). If none had
        been taken (say no connection could be had), all of them do."""
        taken = state.taken or items
        if isinstance(exc, SelfRolledBackError) and state.running is not None:
            self.demote(state.running[0].task.kind)
        log.warning(
            "batched window of %d rolled back (%r); its tasks run again one by one",
            len(taken),
            exc,
        )
        for item in taken:
            item.fallback()
        return len(taken)

    def _begin(self, task: ClaimedTask, ctx: HandlerContext) -> _Started:
        """Before a handler: the lease keeping sees its context; log lines name it."""
        self.runner._notify(task, ctx)
        self.runner.probe("worker.mid_handler")
        return time.perf_counter(), current_task.set((task.id, task.kind, task.attempts))

    def _end(self, task: ClaimedTask, started: _Started, ctx: HandlerContext) -> None:
        current_task.reset(started[1])
        if ctx._checkpointed:
            self.runner.checkpoint_kinds.add(task.kind)
        took = time.perf_counter() - started[0]
        self.runner.observer.ran(task.kind, took, task.waited_s)
        if took > self.config.slow_s:
            log.info("kind %s took %.0f ms in a batched window", task.kind, took * 1000)
            self.demote(task.kind)
