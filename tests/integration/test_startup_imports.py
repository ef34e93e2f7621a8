"""What real ``ledgerq`` processes import, against a real ledger and broker: a
command (``stats``), and a relay and a worker that carry a task between them,
load neither Alembic (the schema check reads the head without it) nor the
benchmark, and the relay and the worker not each other's modules nor the
reconciler's (its blocking broker client, the alert channels); ``migrate`` does
load Alembic (the check can see it). Each process runs ``ledgerq.cli.main`` as ``python -m
ledgerq`` does and writes its ``sys.modules`` when it exits, so a module imported
by any path, ``importlib`` included, is seen (tests/unit/test_startup_imports.py
checks ``--help`` and ``import ledgerq`` without a server)."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path

from ledgerq import TaskSpec
from ledgerq.core.config import Settings
from tests.harness import EFFECTS_DDL, db, effects, enqueue_committed
from tests.support import ledgerq_env, until

#: What no command but ``migrate`` (Alembic) and ``bench`` / ``demo`` loads.
NOT_AT_START = ("alembic", "mako", "pika", "ledgerq.bench", "ledgerq.demo")
NOT_IN_STATS = (*NOT_AT_START, "aio_pika")
#: A service renders no table nor progress bar (rich), nor acts as an operator.
NOT_IN_A_SERVICE = (*NOT_AT_START, "ledgerq.admin", "rich")
NOT_IN_A_WORKER = (
    *NOT_IN_A_SERVICE,
    "ledgerq.relay",
    "ledgerq.compose.relay",
    "ledgerq.compose.reconciler",
    "ledgerq.cli.services",
)
NOT_IN_A_RELAY = (*NOT_IN_A_SERVICE, "ledgerq.compose.reconciler", "ledgerq.cli.worker")
#: ``ledgerq ARGS`` (argv[2:]) in this process; at exit, sys.modules into argv[1].
RUN = (
    "import atexit, json, sys\n"
    "out = sys.argv[1]\n"
    "sys.argv = ['ledgerq', *sys.argv[2:]]\n"
    "def dump():\n"
    "    with open(out, 'w') as f:\n"
    "        json.dump(sorted(sys.modules), f)\n"
    "atexit.register(dump)\n"
    "from ledgerq.cli import main\n"
    "main()\n"
)


def command(out: Path, *args: str) -> list[str]:
    return [sys.executable, "-c", RUN, str(out), *args]


def run(settings: Settings, out: Path, *args: str) -> set[str]:
    done = subprocess.run(
        command(out, *args),
        env=ledgerq_env(settings),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


def found(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in modules))


def test_a_command_imports_no_alembic_and_migrate_does(settings: Settings, tmp_path: Path) -> None:
    stats = run(settings, tmp_path / "stats.json", "stats", "--json")
    assert {"ledgerq.cli.inspect", "psycopg"} <= stats  # it did read the ledger
    assert found(stats, NOT_IN_STATS) == []
    assert "alembic" in run(settings, tmp_path / "migrate.json", "migrate")


def start(settings: Settings, out: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        command(out, *args),
        env=ledgerq_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_a_relay_and_a_worker_import_neither_alembic_nor_each_other(
    settings: Settings, tmp_path: Path
) -> None:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    ids = enqueue_committed(settings, [TaskSpec("test.sync_write", {})])
    relay = start(settings, tmp_path / "relay.json", "relay")
    worker = start(settings, tmp_path / "worker.json", "worker", "--app", "tests.apps.slow_app")
    try:
        await until("the task ran", lambda: effects(settings) == [(ids[0], 1)])
    finally:
        for process in (relay, worker):
            process.send_signal(signal.SIGTERM)
        outputs = [await asyncio.to_thread(p.communicate, timeout=60) for p in (relay, worker)]
    assert (relay.returncode, worker.returncode) == (0, 0), outputs
    relayed = set(json.loads((tmp_path / "relay.json").read_text()))
    assert {"ledgerq.cli.services", "aio_pika"} <= relayed
    assert found(relayed, NOT_IN_A_RELAY) == []
    worked = set(json.loads((tmp_path / "worker.json").read_text()))
    assert {"ledgerq.cli.worker", "aio_pika"} <= worked
    assert found(worked, NOT_IN_A_WORKER) == []
