"""What real ``ledgerq`` processes import, against a real ledger and broker: a
command (``stats``) and a worker that runs a task load neither Alembic (the
schema check reads the head without it) nor the relay, the reconciler, the
blocking broker client or the benchmark; ``migrate`` does load Alembic (the
check can see it). Each process runs ``ledgerq.cli.main`` as ``python -m
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

from ledgerq import Registry, TaskSpec
from ledgerq.core.config import Settings
from tests.harness import EFFECTS_DDL, Pipeline, db, effects, enqueue_committed
from tests.support import ledgerq_env

#: What no command but ``migrate`` (Alembic) and ``bench`` / ``demo`` loads.
NOT_AT_START = ("alembic", "mako", "pika", "ledgerq.bench", "ledgerq.demo")
NOT_IN_STATS = (*NOT_AT_START, "aio_pika")
NOT_IN_A_WORKER = (
    *NOT_AT_START,
    "ledgerq.admin",
    "ledgerq.relay",
    "ledgerq.compose.reconciler",
    "ledgerq.cli.services",
)
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


async def test_a_worker_imports_neither_alembic_nor_the_relay(
    settings: Settings, tmp_path: Path
) -> None:
    with db(settings) as conn:
        conn.execute(EFFECTS_DDL)
    ids = enqueue_committed(settings, [TaskSpec("test.sync_write", {})])
    out = tmp_path / "worker.json"
    worker = subprocess.Popen(
        command(out, "worker", "--app", "tests.apps.slow_app"),
        env=ledgerq_env(settings),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        async with Pipeline(settings, Registry(), start_worker=False) as pipe:
            await pipe.settle(ids)
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = await asyncio.to_thread(worker.communicate, timeout=60)
    assert worker.returncode == 0, output
    assert effects(settings) == [(ids[0], 1)]  # it started, consumed and ran the task
    modules = set(json.loads(out.read_text()))
    assert {"ledgerq.cli.worker", "aio_pika"} <= modules
    assert found(modules, NOT_IN_A_WORKER) == []
