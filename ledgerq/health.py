"""Liveness and readiness of a running relay or worker (``/healthz``, ``/readyz``).

**Alive** means the service's event loop turns: a task on the loop stamps the
time every :data:`TICK_S`; ``/healthz`` fails once the stamp is older than
:data:`STALL_S` (a loop blocked by a handler that never yields, or a deadlock,
is what a restart cures). The endpoint itself answers from the metrics
server's thread, so it can say "stalled" while the loop cannot.

**Ready** means connected and doing its job: every :data:`CHECK_EVERY_S` the
loop asks PostgreSQL (:meth:`~ledgerq.ledger.protocol.InspectionLedger.ping`,
within :data:`CHECK_TIMEOUT_S`), looks at the AMQP connection, and asks the
service (the worker consuming, the relay's last batch not failed). The answer
is cached for the endpoint. A service is not ready while it connects at start
(the endpoint serves before the connections are made) and from the moment it
is asked to stop.

Races: the thread reads two attributes the loop writes (a float, a string),
each a single reference swap; a probe may see an answer one check old.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

log = logging.getLogger("ledgerq")

#: How often the loop stamps that it is alive, and how stale a stamp fails /healthz.
TICK_S = 1.0
STALL_S = 10.0
#: How often readiness is checked, and how long one check may take.
CHECK_EVERY_S = 2.0
CHECK_TIMEOUT_S = 2.0

#: Returns None when ready, else why not (one line).
ReadyCheck = Callable[[], Awaitable[str | None]]


class Health:
    """What /healthz and /readyz answer; fed by :meth:`watch` on the service's loop."""

    def __init__(self, stall_s: float = STALL_S) -> None:
        self.stall_s = stall_s
        self.last_tick = time.monotonic()
        self.problem: str | None = "starting: connecting to PostgreSQL and RabbitMQ"
        self._tasks: list[asyncio.Task[None]] = []

    def alive(self) -> tuple[bool, str]:
        stalled = time.monotonic() - self.last_tick
        if stalled > self.stall_s:
            return False, f"event loop stalled for {stalled:.0f} s"
        return True, "alive"

    def ready(self) -> tuple[bool, str]:
        problem = self.problem
        return (True, "ready") if problem is None else (False, problem)

    def start_ticking(self) -> None:
        """Stamp liveness from this loop (before the service connects)."""
        self._tasks.append(asyncio.create_task(self._tick(), name="ledgerq-health-tick"))

    def watch(self, check: ReadyCheck) -> None:
        """Check readiness with ``check`` from now on (once the service has started)."""
        self._tasks.append(asyncio.create_task(self._check(check), name="ledgerq-health-ready"))

    def stopping(self) -> None:
        """Unready from now on (SIGTERM): readiness is no longer checked."""
        self.problem = "stopping"
        for task in self._tasks[1:]:
            task.cancel()

    async def close(self) -> None:
        self.problem = "stopped"
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks.clear()

    async def _tick(self) -> None:
        while True:
            self.last_tick = time.monotonic()
            await asyncio.sleep(TICK_S)

    async def _check(self, check: ReadyCheck) -> None:
        while True:
            try:
                async with asyncio.timeout(CHECK_TIMEOUT_S):
                    problem = await check()
            except TimeoutError:
                problem = f"readiness check took longer than {CHECK_TIMEOUT_S:.0f} s"
            except Exception as exc:  # a check must not kill the watcher
                problem = f"readiness check failed: {exc}"
            if problem != self.problem:
                log.info("readiness: %s", problem or "ready")
            self.problem = problem
            await asyncio.sleep(CHECK_EVERY_S)
