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
terminating the backend, on MySQL killing the connection, rolls it back and
releases its row locks now, so no
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
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import Connection, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ledgerq.consumers.context import AsyncTaskContext, TaskContext
from ledgerq.consumers.deadline import handler_timeout
from ledgerq.consumers.execute import failure
from ledgerq.consumers.window_items import (
    Item,
    NotLocked,
    Ran,
    SelfRolledBackError,
    WindowState,
    report_all,
)
from ledgerq.consumers.window_plan import (
    CALL,
    CLOSE_MARKS,
    FLUSH,
    MARK,
    OPEN_MARKS,
    UNDO,
    End,
    Handle,
    Lock,
    Succeed,
    TimedOut,
    WindowPlan,
    never,
)
from ledgerq.core.plans import adrive, drive
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
    pass

log = logging.getLogger("ledgerq.worker")


@dataclass
class Windows(WindowPlan):
    """Runs windows of items and reports every item of them (module docstring);
    ``demote(kind)`` sends a kind to the ordinary path for a while."""

    sync_engine: Engine | None
    async_engine: AsyncEngine | None
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
                committed = await self._drive_async(items, state, conn)
        except Exception as exc:  # nothing of the window was committed
            return self._window_failed(items, state, exc)
        self._count(state, committed)
        return len(state.taken)

    async def _drive_async(
        self, items: list[Item], state: WindowState, conn: AsyncConnection
    ) -> bool:
        marks: list[AsyncHandlerMarks] = []

        async def do(step: object) -> Any:
            if isinstance(step, Lock):
                return await alock_within(conn, step.fences)
            if step is OPEN_MARKS:
                return marks.append(await AsyncHandlerMarks.open(conn))
            if isinstance(step, Handle):
                return await self._handle_async(step.item, state, conn, marks[0])
            if step is CLOSE_MARKS:
                return await marks[0].close()
            if isinstance(step, Succeed):
                return await asucceed_within(conn, list(step.fences), list(step.results))
            assert isinstance(step, End)
            return await (conn.commit() if step.commit else conn.rollback())

        return await adrive(self.window_plan(items, state), do)

    async def _handle_async(
        self, item: Item, state: WindowState, conn: AsyncConnection, marks: AsyncHandlerMarks
    ) -> Ran:
        task, fn = item.task, item.handler.fn
        timeout = self._timeout(item)
        ctx = AsyncTaskContext(
            task, self.runner.worker, _bind=conn, _join="rollback_only", _session=state.session
        )

        async def do(step: object) -> Any:
            if step is CALL:
                try:
                    async with asyncio.timeout(timeout):
                        return await fn(task.payload, ctx)
                except TimeoutError:
                    raise TimedOut from None
            if step is MARK:
                return await marks.mark()
            if step is FLUSH:
                assert ctx._session is not None
                return await ctx._session.flush()
            assert step is UNDO
            return await marks.undo()

        return await adrive(self.handler_plan(item, ctx, state, marks, overran=never), do)

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
        limit = self._timeout(item)
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
            limit = self._timeout(item)
            log.warning(
                "task %s outlived its timeout in a batched window; abandoned (its retry "
                "waits for its thread)",
                item.task.id,
            )
            self.demote(item.task.kind)
            timed_out = failure(
                item.task, f"timed out after {limit or 0:g} s (in a batched window)"
            )
            self.runner.hung.watch(item.task, future, since + (limit or 0.0))
            future.add_done_callback(lambda _: item.report(timed_out))
        return len(taken)

    def _sync_thread(self, items: list[Item], state: WindowState) -> bool:
        """In a pool thread: the window; whether it committed. ``state`` fills as it goes."""
        assert self.sync_engine is not None
        with self.sync_engine.connect() as conn:
            conn.begin()
            marks: list[HandlerMarks] = []

            def do(step: object) -> Any:
                if isinstance(step, Lock):
                    return lock_within(conn, step.fences)
                if step is OPEN_MARKS:
                    return marks.append(HandlerMarks(conn))
                if isinstance(step, Handle):
                    return self._handle_sync(step.item, state, conn, marks[0])
                if step is CLOSE_MARKS:
                    return marks[0].close()
                if isinstance(step, Succeed):
                    return succeed_many_within(conn, list(step.fences), list(step.results))
                assert isinstance(step, End)
                return conn.commit() if step.commit else conn.rollback()

            return drive(self.window_plan(items, state), do)

    def _handle_sync(
        self, item: Item, state: WindowState, conn: Connection, marks: HandlerMarks
    ) -> Ran:
        """One sync handler in the window (in its thread), as :meth:`_handle_async`."""
        task, fn = item.task, item.handler.fn
        timeout = self._timeout(item)
        ctx = TaskContext(
            task, self.runner.worker, _bind=conn, _join="rollback_only", _session=state.session
        )
        state.ctx = ctx

        def do(step: object) -> Any:
            if step is CALL:
                return fn(task.payload, ctx)
            if step is MARK:
                return marks.mark()
            if step is FLUSH:
                assert ctx._session is not None
                return ctx._session.flush()
            assert step is UNDO
            return marks.undo()

        def overran(started: float) -> bool:
            return time.perf_counter() - started > (timeout or math.inf)

        self.runner.in_threads.add(task.fence)
        try:
            return drive(self.handler_plan(item, ctx, state, marks, overran=overran), do)
        finally:
            self.runner.in_threads.discard(task.fence)

    # -- shared ------------------------------------------------------------------
    def _timeout(self, item: Item) -> float | None:
        """How long ``item``'s handler may run (the worker's rule, its default included)."""
        return handler_timeout(item.task, item.handler, self.runner.default_timeout_s)

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
