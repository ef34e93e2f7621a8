"""SIGTERM in every state (issue 28, item 3): a ``ledgerq worker`` and a ``ledgerq
relay``, real processes, are sent SIGTERM while the broker is down, while the
database is down (back within the grace, and not), while a lane is blocked on
a rate limit, during start-up before RabbitMQ or PostgreSQL answered, and in
the reconnect back-off of an outage. Each must drain what it holds within its
``--grace`` and exit 0, or, when it cannot drain (outcomes it could not write),
exit 69 with one line, never later than the grace plus :data:`SLACK_S`.

Before: a worker whose broker connection was lost waited for the broker to come
back before it even began to drain (aio-pika's cancel of its consumer waits for
the reconnect), and both services ignored SIGTERM until their connect wait was
over (the worker, then exit 69) or died of the signal (the relay).

The broker faults use the fault suite's own RabbitMQ node (``broker_node``);
the database faults refuse new connections to the suite's own database and
terminate its services' backends (:func:`~tests.faults.outages.database_down`).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.faults.outages import database_down
from tests.harness import enqueue_committed
from tests.pki import free_port
from tests.rabbit import RabbitNode
from tests.support import ledgerq, ledgerq_env, until

#: "Grace plus a few seconds": what a process may take past its grace to close its
#: connections and exit on this (shared, two-core) machine. Under a loaded machine a
#: bare command took 28 s to start (tests/integration/test_misconfiguration.py);
#: a stop that ignored its grace would hang until the test's own bound, far past this.
SLACK_S = 10.0
WORKER = ("worker", "--app", "tests.apps.sigterm_app", "--concurrency", "4", "--db-pool", "2")
RELAY = ("relay", "--poll-interval", "0.2")
#: What each logs (-v) once it serves, and when a stop came during its start-up.
SERVING = {"worker": " consuming ", "relay": "relay running"}
ABANDONED = "stop requested during start-up; exiting"
RELAY_DOWN = "relay batch failed ("
SUBSCRIBER_DOWN = "refreshing the worker's subscriptions failed ("


@dataclass
class Service:
    """A ``ledgerq -v`` process, its output in a file."""

    role: str
    proc: subprocess.Popen[bytes]
    log: Path
    metrics_port: int
    signalled: float = field(default=0.0)

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def serving(self) -> bool:
        return SERVING[self.role] in self.text()

    def terminate(self) -> None:
        self.signalled = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)

    async def exit(self, within: float) -> tuple[int, float]:
        """Its exit code and the seconds from SIGTERM to its exit; a failure (with its
        output) if it is still running ``within`` seconds after the signal."""
        try:
            code = await asyncio.to_thread(
                self.proc.wait, max(0.0, self.signalled + within - time.monotonic())
            )
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"{self.role} still running {within:g} s after SIGTERM:\n{self.text()[-4000:]}"
            ) from None
        return code, time.monotonic() - self.signalled

    def readiness(self) -> str:
        """What its ``/readyz`` says now ("" while it does not answer)."""
        url = f"http://127.0.0.1:{self.metrics_port}/readyz"
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:
                return str(answer.read().decode())
        except urllib.error.HTTPError as error:
            return str(error.read().decode())
        except OSError:
            return ""


Start = Callable[..., Service]


@pytest.fixture
async def start(settings: Settings, tmp_path: Path) -> AsyncIterator[Start]:
    """Start ``ledgerq -v ROLE ARGS`` (``env``: environment overrides) with a metrics
    port of its own; whatever still runs at the end is killed."""
    services: list[Service] = []

    def start(role: str, *args: str, **env: str) -> Service:
        log = tmp_path / f"{role}-{len(services)}.log"
        port = free_port()
        with log.open("ab") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "ledgerq", "-v", role, *args, "--metrics-port", str(port)],
                env=ledgerq_env(settings, **env),
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        services.append(Service(role, proc, log, port))
        return services[-1]

    yield start
    for service in services:
        if service.proc.poll() is None:
            service.proc.kill()
            service.proc.wait()


async def statuses(ledger: PgLedger, ids: list[int]) -> list[str]:
    where = await ledger.whereabouts(ids)
    return [where.get(i, "absent") for i in ids]


async def all_in(ledger: PgLedger, ids: list[int], status: str) -> bool:
    return set(await statuses(ledger, ids)) == {status}


def sleeps(n: int, seconds: float) -> list[TaskSpec]:
    return [TaskSpec("sig.sleep", {"seconds": seconds}) for _ in range(n)]


def clean_exit(service: Service, code: int, took: float, within: float) -> None:
    print(f"{service.role}: exit {code} {took:.1f} s after SIGTERM")
    assert code == 0, service.text()[-4000:]
    assert took <= within, f"{service.role} took {took:.1f} s"
    assert "Traceback" not in service.text(), service.text()[-4000:]


async def test_broker_down_the_worker_drains_within_its_grace_and_the_relay_exits(
    settings: Settings, ledger: PgLedger, broker_node: RabbitNode, start: Start
) -> None:
    worker = start(*WORKER, "--grace", "5")
    relay = start(*RELAY)
    await until("both serving", lambda: worker.serving() and relay.serving())
    ids = enqueue_committed(settings, sleeps(4, seconds=2.5))
    await until("every task running", lambda: all_in(ledger, ids, "running"))
    await asyncio.to_thread(broker_node.ctl, "stop_app")
    try:
        await until(
            "the worker knows the broker is gone",
            lambda: "RabbitMQ: not connected" in worker.readiness(),
        )
        worker.terminate()
        relay.terminate()
        code, took = await worker.exit(within=5 + SLACK_S)
        clean_exit(worker, code, took, 5 + SLACK_S)
        code, took = await relay.exit(within=SLACK_S)
        clean_exit(relay, code, took, SLACK_S)
    finally:
        await asyncio.to_thread(broker_node.ctl, "start_app")
        await asyncio.to_thread(broker_node.ctl, "await_startup")
    # Drained: the handlers finished and their outcomes were written while the
    # broker was away (the acks were not sent: their redeliveries are skipped).
    assert await statuses(ledger, ids) == ["succeeded"] * len(ids)
    assert "worker stopped: " in worker.text()


async def test_database_down_briefly_the_worker_writes_its_outcomes_once_it_is_back(
    settings: Settings, ledger: PgLedger, start: Start
) -> None:
    worker = start(*WORKER, "--grace", "8")
    relay = start(*RELAY)
    await until("both serving", lambda: worker.serving() and relay.serving())
    ids = enqueue_committed(settings, sleeps(4, seconds=1.5))
    await until("every task running", lambda: all_in(ledger, ids, "running"))
    with database_down(settings):
        worker.terminate()
        relay.terminate()
        code, took = await relay.exit(within=SLACK_S)
        clean_exit(relay, code, took, SLACK_S)
        # The handlers end while the database is away; the finisher retries their
        # outcomes until it is back (here, within the grace).
        await until("the worker's outcomes waiting", lambda: "outcomes failed" in worker.text())
        assert worker.proc.poll() is None
    code, took = await worker.exit(within=8 + SLACK_S)
    clean_exit(worker, code, took, 8 + SLACK_S)
    assert await statuses(ledger, ids) == ["succeeded"] * len(ids)


async def test_database_down_past_the_grace_the_worker_exits_69_with_one_line(
    settings: Settings, ledger: PgLedger, start: Start
) -> None:
    worker = start(*WORKER, "--grace", "2", "--lease", "2")
    relay = start(*RELAY)
    await until("both serving", lambda: worker.serving() and relay.serving())
    ids = enqueue_committed(settings, sleeps(3, seconds=1.0))
    await until("every task running", lambda: all_in(ledger, ids, "running"))
    with database_down(settings):
        worker.terminate()
        relay.terminate()
        code, took = await relay.exit(within=SLACK_S)
        clean_exit(relay, code, took, SLACK_S)
        code, took = await worker.exit(within=2 + SLACK_S)
    output = worker.text()
    assert code == 69, output[-4000:]  # EX_UNAVAILABLE
    assert took <= 2 + SLACK_S
    assert "Traceback" not in output, output[-4000:]
    last = output.strip().splitlines()[-1]
    assert last == (
        "ledgerq: stopped with 3 outcomes not written (the database did not answer within "
        "the grace): their leases lapse and `ledgerq reconcile` retries those tasks"
    ), output[-4000:]
    # Nothing lost: the tasks are still ``running`` under the dead worker's lapsing
    # lease, and a reconciler pass takes them back once it has lapsed.
    assert await statuses(ledger, ids) == ["running"] * len(ids)

    async def taken_back() -> bool:
        result = ledgerq(settings, "reconcile")
        assert result.returncode == 0, result.stderr
        return await all_in(ledger, ids, "pending")

    await until("the reconciler retrying them", taken_back, timeout=20)


async def test_a_lane_blocked_on_a_rate_limit_stops_with_the_others(
    settings: Settings, ledger: PgLedger, start: Start
) -> None:
    # Two lanes: "default" runs sleeps, "other" has one rate-limited kind whose
    # bucket (one an hour) is empty after its first task: the relay holds the rest.
    worker = start(*WORKER, "--queues", "default=2,other=2", "--grace", "5")
    relay = start(*RELAY)
    await until("both serving", lambda: worker.serving() and relay.serving())
    limited = enqueue_committed(settings, [TaskSpec("sig.limited", queue="other")] * 3)
    await until("the first limited task run", lambda: _any(ledger, limited, "succeeded"))
    running = enqueue_committed(settings, sleeps(2, seconds=2.0))
    await until("the other lane running", lambda: all_in(ledger, running, "running"))
    assert sorted(await statuses(ledger, limited)) == ["pending", "pending", "succeeded"]
    worker.terminate()
    relay.terminate()
    code, took = await worker.exit(within=5 + SLACK_S)
    clean_exit(worker, code, took, 5 + SLACK_S)
    code, took = await relay.exit(within=SLACK_S)
    clean_exit(relay, code, took, SLACK_S)
    assert await statuses(ledger, running) == ["succeeded"] * 2
    # The blocked tasks were never handed to the worker: still pending, unattempted.
    assert sorted(await statuses(ledger, limited)) == ["pending", "pending", "succeeded"]


async def _any(ledger: PgLedger, ids: list[int], status: str) -> bool:
    return status in await statuses(ledger, ids)


@pytest.mark.parametrize("role", ["worker", "relay"])
@pytest.mark.parametrize("server", ["RabbitMQ", "PostgreSQL"])
async def test_a_stop_during_start_up_abandons_the_wait_for_a_server(
    settings: Settings, start: Start, role: str, server: str
) -> None:
    nowhere = free_port()  # nothing listens there
    env = (
        {"LEDGERQ_AMQP_URL": f"amqp://guest:guest@127.0.0.1:{nowhere}/"}
        if server == "RabbitMQ"
        else {"LEDGERQ_DATABASE_URL": f"postgresql+psycopg://postgres@127.0.0.1:{nowhere}/x"}
    )
    args = WORKER if role == "worker" else RELAY
    # A minute of connect wait: an exit within seconds is the signal's doing.
    service = start(*args, LEDGERQ_CONNECT_WAIT_S="60", **env)
    await until(f"the {role} waiting for {server}", lambda: f"{server} at " in service.text())
    service.terminate()
    code, took = await service.exit(within=SLACK_S)
    clean_exit(service, code, took, SLACK_S)
    assert ABANDONED in service.text()


async def test_a_stop_in_the_reconnect_back_off_of_an_outage_exits_at_once(
    settings: Settings, ledger: PgLedger, broker_node: RabbitNode, start: Start
) -> None:
    """Idle services, each retrying with back-off: the broker away (the worker's
    connection reconnecting, the relay's batches failing), then the database away
    (the relay's batches and the worker's subscription refreshes failing)."""
    for outage in ("broker", "database"):
        worker = start(*WORKER, "--lease", "2", "--grace", "5")
        relay = start(*RELAY)
        await until("both serving", lambda: worker.serving() and relay.serving())
        if outage == "broker":
            await asyncio.to_thread(broker_node.ctl, "stop_app")
            try:
                # A task to publish makes the relay's batches fail (it stays pending).
                [waiting] = enqueue_committed(settings, sleeps(1, 0.1))
                await until("the relay backing off", lambda: RELAY_DOWN in relay.text())
                await until(
                    "the worker reconnecting",
                    lambda: "RabbitMQ: not connected" in worker.readiness(),
                )
                worker.terminate()
                relay.terminate()
                for service in (worker, relay):
                    code, took = await service.exit(within=SLACK_S)
                    clean_exit(service, code, took, SLACK_S)
            finally:
                await asyncio.to_thread(broker_node.ctl, "start_app")
                await asyncio.to_thread(broker_node.ctl, "await_startup")
            assert await statuses(ledger, [waiting]) == ["pending"]
        else:
            # The broker round's task runs now; its outcome must be written before
            # the database goes, or the worker rightly spends its grace on it.
            await until(
                "the broker round's task done", lambda: all_in(ledger, [waiting], "succeeded")
            )
            with database_down(settings):
                await until(
                    "both backing off",
                    lambda: RELAY_DOWN in relay.text() and SUBSCRIBER_DOWN in worker.text(),
                )
                worker.terminate()
                relay.terminate()
                for service in (worker, relay):
                    code, took = await service.exit(within=SLACK_S)
                    clean_exit(service, code, took, SLACK_S)
