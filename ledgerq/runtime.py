"""Process plumbing for the long-running services: the event loop, and what stops
a service (the stop signals, and a ledger whose schema is gone).

A stop signal is honoured in every state, start-up included: the services catch
the signals before they connect, never block the event loop while they wait for
a server (:func:`off_loop` runs the blocking waits in a thread of their own),
and run their start-up through :func:`unless_stopped`, which abandons it when a
stop comes first: what it opened is closed, nothing was claimed yet, and the
process exits 0 at once instead of after the connect wait. Races: a stop that
comes as the start-up completes is seen by the service's own loop, which drains
as after any stop.

The relay and workers spend much of their CPU in the event loop's socket
handling, which uvloop does in C; ``LEDGERQ_EVENT_LOOP=asyncio`` (validated with
the other settings) opts out.

:class:`SchemaWatch` and :class:`WatchedLedger`: a running relay or worker whose
tables are dropped meets :class:`~ledgerq.core.errors.SchemaMissingError` on
its next statement. The service's own loop treats any failed statement as
something to retry; the watched ledger sees that error first and asks the
service to stop, as SIGTERM would (the relay finishes its loop, the worker
drains), and the composition root raises it afterwards.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
import logging
import signal
import threading
from collections.abc import (
    AsyncIterator,
    Callable,
    Coroutine,
    Iterator,
)
from contextlib import AbstractAsyncContextManager, asynccontextmanager, contextmanager
from typing import Any, TypeVar, cast

from ledgerq.core.errors import SchemaMissingError

T = TypeVar("T")
L = TypeVar("L")
log = logging.getLogger("ledgerq")


def run_service(main: Coroutine[Any, Any, T], event_loop: str = "uvloop") -> T:
    """Run a service's coroutine on uvloop (or, with ``"asyncio"``, asyncio's own loop)
    and return its result."""
    if event_loop == "asyncio":
        return asyncio.run(main)
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def off_loop(call: Callable[[], T]) -> T:
    """``call()`` in a daemon thread of its own: the event loop (and with it the stop
    signals) stays responsive while it blocks. A caller cancelled meanwhile stops
    waiting at once; the thread runs on until ``call`` returns but never holds up
    the process's exit (a default-executor thread would: ``asyncio.run`` joins it)."""
    future: concurrent.futures.Future[T] = concurrent.futures.Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(call())
        except BaseException as exc:  # handed to the caller, raised there
            future.set_exception(exc)

    threading.Thread(target=run, name="ledgerq-off-loop", daemon=True).start()
    return await asyncio.wrap_future(future)


async def unless_stopped(stop: asyncio.Event, starting: Coroutine[Any, Any, T]) -> T | None:
    """Run a service's start-up, ``starting``, until it completes (its result, or its
    error raised) or ``stop`` is set first: then it is cancelled, what it opened is
    closed (its own cleanup runs before this returns), and the answer is None."""
    task = asyncio.ensure_future(starting)
    stopped = asyncio.ensure_future(stop.wait())
    abandoned = True
    try:
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        abandoned = not task.done()
    finally:
        stopped.cancel()
        if abandoned:
            task.cancel()
            # However the cancelled start-up ends (a cleanup may raise), it was
            # abandoned on purpose: what it raises now is noise.
            for outcome in await asyncio.gather(task, return_exceptions=True):
                if isinstance(outcome, Exception):
                    log.debug("abandoned start-up ended with %r", outcome)
    return None if abandoned else task.result()


def on_stop_signal(stop: Callable[[], None]) -> None:
    """Call ``stop`` on SIGTERM or SIGINT (graceful shutdown)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


class SchemaWatch:
    """Stops a service the first time its ledger reports the schema gone."""

    def __init__(self) -> None:
        self.error: SchemaMissingError | None = None
        self._stops: list[Callable[[], None]] = []

    def on_loss(self, stop: Callable[[], None]) -> None:
        self._stops.append(stop)

    @contextmanager
    def watching(self) -> Iterator[None]:
        try:
            yield
        except SchemaMissingError as exc:
            if self.error is None:
                self.error = exc
                log.error("stopping: %s", exc)
                for stop in self._stops:
                    stop()
            raise

    def raise_if_lost(self) -> None:
        if self.error is not None:
            raise self.error


class WatchedLedger:
    """Any ledger, reporting a lost schema to a watch: every awaited method of the
    wrapped ledger runs in :meth:`SchemaWatch.watching`, and so does the whole block
    of every method that returns an async context manager (a publish batch is
    watched until its block exits). Everything else is the wrapped ledger's own.
    Written once for every protocol: a new storage method is watched without a
    line here. Build it with :func:`watched`, which keeps the ledger's type."""

    def __init__(self, ledger: object, watch: SchemaWatch) -> None:
        self._ledger = ledger
        self._watch = watch

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._ledger, name)
        if name.startswith("_") or not callable(attr):
            return attr
        watch = self._watch
        if inspect.iscoroutinefunction(attr):

            @functools.wraps(attr)
            async def awaited(*args: Any, **kwargs: Any) -> Any:
                with watch.watching():
                    return await attr(*args, **kwargs)

            return awaited

        @functools.wraps(attr)
        def called(*args: Any, **kwargs: Any) -> Any:
            result = attr(*args, **kwargs)
            if isinstance(result, AbstractAsyncContextManager):
                return _watched_block(result, watch)
            return result

        return called


@asynccontextmanager
async def _watched_block(
    block: AbstractAsyncContextManager[T], watch: SchemaWatch
) -> AsyncIterator[T]:
    with watch.watching():
        async with block as entered:
            yield entered


def watched(ledger: L, watch: SchemaWatch) -> L:
    """``ledger`` (of whatever protocol) reporting a lost schema to ``watch``."""
    return cast(L, WatchedLedger(ledger, watch))
