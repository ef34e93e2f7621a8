"""The per-process registry of result() waiters: one connection per database, however many wait.

:func:`registry` hands out one :class:`Registry` per database (per libpq
connection string) in the process. A registry owns one thread and one
autocommit connection, on which it ``LISTEN``\\ s ``ledgerq_ended`` and reads
its waiters' tasks (the seam's ``ended_results``, :class:`PgTx`), in one
statement for as many as wait. The thread sleeps in ``select`` on that
connection's socket and on a wake-up socket until the first of:

- a notification (every statement that ends tasks sends one on commit, its
  payload the ids, or empty for a large statement): it reads those of its
  waiters' ids (all of them for an empty payload);
- a new waiter (:meth:`Registry.wait` / :meth:`Registry.await_result` register,
  then poke the wake-up socket): it reads the new ones. The read happens on the
  thread, after the ``LISTEN`` of the connection it runs on, so a task ending
  between the registration and the read is seen by the read or notified after
  it: no gap;
- ``poll_s`` since the last full read: it reads all its waiters (notifications
  are lost with a connection and absent behind PgBouncer's transaction pooling,
  where the ``LISTEN`` is accepted and never delivers).

Ending statements notify only while some registry has waiters: before reading,
a registry with waiters writes (and every ``RENEW_S`` renews) its row of
``ledgerq_waiting`` for ``ANNOUNCE_S`` seconds, committed before the read, and
deletes it when it goes idle. A finish whose statement began before that first
row committed may end a waiter's task unannounced and after its first read:
the next poll finds it (``poll_s`` at most, once, when a process's first waiter
arrives).

A read hands each terminal task's :class:`~ledgerq.ledger.results.TaskResult`
to its waiters (an async waiter's future is resolved on its own loop,
``call_soon_threadsafe``), and an id in neither table a
:class:`~ledgerq.core.errors.TaskNotFoundError`. A lost connection is logged
once per outage (:mod:`ledgerq.ledger.outages`) and reopened with backoff; the
first read after it reads every waiter. Timeouts are the waiters' own: a waiter
that gives up unregisters. With no waiter for ``IDLE_S`` the thread closes the
connection and ends; the next waiter starts another.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Iterable
from typing import Any

import psycopg

from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.outages import Outage
from ledgerq.ledger.pg.tx import PgTx
from ledgerq.ledger.task_result import TaskResult, not_found

log = logging.getLogger("ledgerq.ledger.results")

CHANNEL = "ledgerq_ended"
#: The registries' connections, as pg_stat_activity shows them.
APPLICATION_NAME = "ledgerq-results"
#: Ids per read statement.
READ_CHUNK = 5000
#: Seconds with no waiter after which a registry closes its connection.
IDLE_S = 30.0
#: A registry with waiters renews its ``ledgerq_waiting`` row this often, for
#: ``ANNOUNCE_S`` seconds at a time.
RENEW_S = 10.0
ANNOUNCE_S = 30.0
#: A waiter with a shorter timeout still waits this long for its first read (the
#: connection's set-up included), so that ``timeout=0`` looks once.
FIRST_LOOK_S = 5.0

Outcome = TaskResult | LedgerqError


class _Waiter:
    """One call waiting for ``task_id``: a thread's events, or a loop's futures.
    ``looked``: the registry has read the task once since the waiter came."""

    __slots__ = ("event", "future", "look_future", "looked", "loop", "outcome", "task_id")

    def __init__(self, task_id: int, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self.task_id = task_id
        self.loop = loop
        self.event = threading.Event()
        self.looked = threading.Event()
        self.future: asyncio.Future[Outcome] | None = loop.create_future() if loop else None
        self.look_future: asyncio.Future[Outcome | None] | None = (
            loop.create_future() if loop else None
        )
        self.outcome: Outcome | None = None

    def look(self, outcome: Outcome | None = None) -> None:
        """The registry read the task: ``outcome`` if it ended (or is unknown)."""
        first = not self.looked.is_set()
        if outcome is not None:
            self.outcome = outcome
            self.event.set()
        self.looked.set()
        loop, looked, ended = self.loop, self.look_future, self.future
        if loop is not None and looked is not None and ended is not None:
            if not first and outcome is None:
                return
            # one callback: the loop sees the look and the outcome at once
            with contextlib.suppress(RuntimeError):  # its loop closed: nobody waits
                loop.call_soon_threadsafe(_settle, looked, ended, outcome)


def _settle(
    looked: asyncio.Future[Outcome | None], ended: asyncio.Future[Outcome], outcome: Outcome | None
) -> None:
    """On the waiter's loop: its first look done, and its outcome if it ended."""
    if not looked.done():
        looked.set_result(outcome)
    if outcome is not None and not ended.done():
        ended.set_result(outcome)


def _returned(outcome: Outcome | None) -> TaskResult:
    assert outcome is not None
    if isinstance(outcome, LedgerqError):
        raise outcome
    return outcome


def _parse(payload: str) -> set[int] | None:
    """The ids of a notification; None: any task may have ended."""
    try:
        return {int(part) for part in payload.split(",")} if payload else None
    except ValueError:
        return None


class Registry:
    """The waiters of one database in this process (see the module's docstring)."""

    def __init__(self, conninfo: str, poll_s: float) -> None:
        if not poll_s > 0:
            raise ValueError(f"result(poll_s=...) is seconds, more than 0; got {poll_s!r}")
        self._conninfo = conninfo
        self.poll_s = poll_s
        self._lock = threading.Lock()
        self._waiters: dict[int, list[_Waiter]] = {}
        self._new: set[int] = set()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self.name = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self._announced: float | None = None
        self.outage = Outage("result() waiters' connection (retrying)", log)
        #: Counts, for the benchmark and the tests: reads, notifications, ids read.
        self.reads = self.notifications = 0

    def wait(self, task_id: int, timeout: float | None) -> TaskResult:
        """Block until ``task_id`` is terminal (see :func:`ledgerq.result`). The
        timeout runs from the call, but the first read is waited for (up to
        ``FIRST_LOOK_S`` past a shorter timeout): ``timeout=0`` looks once."""
        waiter = _Waiter(task_id)
        self._add(waiter)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            waiter.looked.wait(None if timeout is None else max(timeout, FIRST_LOOK_S))
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not waiter.event.wait(left):
                raise TimeoutError(f"task {task_id} did not end within {timeout} s")
            return _returned(waiter.outcome)
        finally:
            self._remove(waiter)

    async def await_result(
        self, task_id: int, timeout: float | None, loop: asyncio.AbstractEventLoop
    ) -> TaskResult:
        """:meth:`wait` on ``loop``, never blocking it."""
        waiter = _Waiter(task_id, loop)
        assert waiter.future is not None and waiter.look_future is not None
        self._add(waiter)
        try:
            deadline = None if timeout is None else time.monotonic() + timeout
            first = None if timeout is None else max(timeout, FIRST_LOOK_S)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.look_future, first)
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                outcome = await asyncio.wait_for(waiter.future, left)
            except TimeoutError:
                raise TimeoutError(f"task {task_id} did not end within {timeout} s") from None
            return _returned(outcome)
        finally:
            self._remove(waiter)

    def _add(self, waiter: _Waiter) -> None:
        with self._lock:
            self._waiters.setdefault(waiter.task_id, []).append(waiter)
            self._new.add(waiter.task_id)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="ledgerq-results", daemon=True
                )
                self._thread.start()
        self._poke()

    def _remove(self, waiter: _Waiter) -> None:
        with self._lock:
            waiting = self._waiters.get(waiter.task_id, [])
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting:
                self._waiters.pop(waiter.task_id, None)

    def _poke(self) -> None:
        with contextlib.suppress(BlockingIOError):  # full of pokes: the thread will look
            self._wake_w.send(b"\0")

    def _run(self) -> None:
        while True:
            try:
                if self._serve():
                    return
            except (psycopg.Error, OSError) as exc:  # the connection, never our data
                time.sleep(self.outage.failed(exc, expected=True))
            except Exception as exc:  # a bug: logged with its traceback; it serves on
                time.sleep(self.outage.failed(exc))

    def _serve(self) -> bool:
        """One connection's life; True when the registry went idle and stopped."""
        with psycopg.connect(
            self._conninfo,
            autocommit=True,
            connect_timeout=5,
            prepare_threshold=None,
            application_name=APPLICATION_NAME,
        ) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            self.outage.succeeded()
            tx = PgTx(conn, "result")
            self._announced = None
            due = 0.0  # a full read first: anything may have ended while away
            idle_since: float | None = None
            while True:
                now = time.monotonic()
                with self._lock:
                    waiting = bool(self._waiters)
                    if waiting:
                        idle_since = None
                    elif idle_since is None:
                        idle_since = now
                    elif now - idle_since >= IDLE_S:
                        self._thread = None
                        tx.withdraw_waiting(self.name)
                        return True
                wanted = self._wanted(conn, max(0.0, due - now))
                if wanted is None or time.monotonic() >= due:
                    wanted = None
                    due = time.monotonic() + self.poll_s
                self._announce(tx)
                self._read(tx, wanted)

    def _announce(self, tx: PgTx) -> None:
        """Renew this registry's ``ledgerq_waiting`` row while it has waiters,
        committed before the reads it precedes (autocommit)."""
        now = time.monotonic()
        with self._lock:
            waiting = bool(self._waiters)
        if waiting and (self._announced is None or now - self._announced >= RENEW_S):
            tx.announce_waiting(self.name, ANNOUNCE_S)
            self._announced = now

    def _wanted(self, conn: psycopg.Connection[Any], timeout: float) -> set[int] | None:
        """Sleep until a notification, a new waiter or ``timeout``; the ids to read
        (None: all of them)."""
        wake = self._wake_r.fileno()
        ready, _, _ = select.select([conn.fileno(), wake], [], [], timeout)
        wanted: set[int] = set()
        if wake in ready:
            try:
                while self._wake_r.recv(4096):
                    pass
            except BlockingIOError:
                pass
        for note in conn.notifies(timeout=0):
            self.notifications += 1
            ids = _parse(note.payload)
            if ids is None:
                return None
            wanted |= ids
        with self._lock:
            wanted |= self._new
            self._new.clear()
        return wanted

    def _read(self, tx: PgTx, wanted: set[int] | None) -> None:
        with self._lock:
            waiting = self._waiters
            ids = list(waiting) if wanted is None else [i for i in wanted if i in waiting]
        for start in range(0, len(ids), READ_CHUNK):
            chunk = ids[start : start + READ_CHUNK]
            found = {r.id: r for r in tx.ended_results(chunk)}
            self.reads += 1
            self._deliver(chunk, found)

    def _deliver(self, ids: Iterable[int], found: dict[int, TaskResult]) -> None:
        for task_id in ids:
            row = found.get(task_id)
            outcome: Outcome | None = row if row is not None else not_found(task_id)
            if row is not None and not row.done:
                outcome = None  # still live: looked at, not ended
            with self._lock:
                waiting = list(self._waiters.get(task_id, ()))
            for waiter in waiting:
                waiter.look(outcome)


_REGISTRIES: dict[str, Registry] = {}
_REGISTRIES_LOCK = threading.Lock()


def registry(conninfo: str, poll_s: float) -> Registry:
    """This process's registry for the database at ``conninfo`` (created on first
    use, with ``poll_s``; later callers share it as it is)."""
    with _REGISTRIES_LOCK:
        found = _REGISTRIES.get(conninfo)
        if found is None:
            found = _REGISTRIES[conninfo] = Registry(conninfo, poll_s)
        return found


def _forget_after_fork() -> None:
    """A forked child has none of its parent's threads: it starts its own registries."""
    _REGISTRIES.clear()


os.register_at_fork(after_in_child=_forget_after_fork)
