"""The RabbitMQ permissions docs/security.md recommends, applied with the exact
``rabbitmqctl set_permissions`` lines of that page to throwaway users, and
checked against the real broker: the relay and the reconciler publish, the
worker consumes and runs what they published, and neither can do the other's job.

Needs ``rabbitmqctl`` on this machine with the right to add users (skipped
otherwise); the users are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pika
import pika.exceptions
import pytest
from yarl import URL

from ledgerq import AsyncTaskContext, Registry, TaskSpec
from ledgerq.broker.topology import Topology
from ledgerq.compose import open_reconciler, open_relay, open_worker
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import enqueue_committed

SECURITY_MD = Path(__file__).parents[2] / "docs" / "security.md"


def ctl(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["rabbitmqctl", *args], capture_output=True, text=True, timeout=60, check=False
    )


def documented_permissions(user: str) -> tuple[str, str, str]:
    """The configure, write and read expressions security.md gives ``user``."""
    for line in SECURITY_MD.read_text().splitlines():
        if line.startswith(f"rabbitmqctl set_permissions -p / {user} "):
            configure, write, read = shlex.split(line)[-3:]
            return configure, write, read
    raise AssertionError(f"docs/security.md has no set_permissions line for {user}")


@pytest.fixture
def users(settings: Settings) -> Iterator[dict[str, Settings]]:
    """A publisher and a worker user with the documented permissions, for this
    test's prefix; their Settings carry their own AMQP URLs."""
    if shutil.which("rabbitmqctl") is None or ctl("list_users").returncode != 0:
        pytest.skip("rabbitmqctl is not usable here")
    prefix = re.escape(settings.amqp_prefix + ".")
    made: dict[str, Settings] = {}
    try:
        for role in ("publisher", "worker"):
            name, secret = f"lqtest-{role}-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
            assert ctl("add_user", name, secret).returncode == 0
            made[role] = replace(
                settings,
                amqp_url=str(URL(settings.amqp_url).with_user(name).with_password(secret)),
            )
            patterns = [
                p.replace(r"ledgerq\.", prefix) for p in documented_permissions(f"ledgerq-{role}")
            ]
            assert ctl("set_permissions", "-p", "/", name, *patterns).returncode == 0
        yield made
    finally:
        for user_settings in made.values():
            ctl("delete_user", URL(user_settings.amqp_url).user or "")


def refused(settings: Settings, action: str, topology: Topology) -> bool:
    """Whether the broker refuses ``action`` ("publish" or "get") for these credentials."""
    conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    try:
        channel = conn.channel()
        queue = topology.task_queue("default")
        if action == "publish":
            channel.confirm_delivery()
            channel.basic_publish(queue.exchange, queue.routing_key, b'{"id": 1, "epoch": 0}')
        else:
            channel.basic_get(queue.name)
    except pika.exceptions.ChannelClosedByBroker as exc:
        return exc.reply_code == 403
    finally:
        if conn.is_open:
            conn.close()
    return False


async def test_the_documented_permissions_let_each_process_do_its_job_and_no_more(
    settings: Settings, users: dict[str, Settings], ledger: PgLedger
) -> None:
    registry = Registry()
    ran: list[int] = []

    @registry.task("t.perm")
    async def perm(payload: Any, ctx: AsyncTaskContext) -> None:
        ran.append(ctx.id)

    ids = enqueue_committed(settings, [TaskSpec("t.perm", {"i": i}) for i in range(5)])
    config = WorkerConfig(concurrency=2, lease_s=30, heartbeat_s=5, grace_s=2)
    # The worker starts first and declares its queue; the publisher only re-declares it.
    async with (
        open_worker(users["worker"], registry, config) as worker,
        open_relay(users["publisher"]) as relay,
    ):
        published, deadline = 0, time.monotonic() + 20
        while worker.counts.succeeded < len(ids) and time.monotonic() < deadline:
            # the worker's window (its prefetch, 4) lets the relay publish in steps
            published += (await relay.run_once()).published
            await asyncio.sleep(0.05)
        assert published == len(ids)
    async with open_reconciler(users["publisher"]) as reconciler:
        assert (await reconciler.run_once()).acted

    assert sorted(ran) == sorted(ids)
    assert set((await ledger.whereabouts(ids)).values()) == {"succeeded"}
    topology = Topology(settings.amqp_prefix)
    assert refused(users["worker"], "publish", topology)  # a worker cannot make tasks
    assert refused(users["publisher"], "get", topology)  # the relay cannot take them
    assert not refused(settings, "get", topology)  # (the check itself can pass)
