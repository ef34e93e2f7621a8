"""``ledgerq bench --peer celery``: Celery draining the same work beside ledgerq.

The peer (:mod:`.celery_app`) runs as a real ``celery worker`` process: the
RabbitMQ broker of the bench, ``acks_late``, the prefork pool with concurrency
2 (one per core of the machine measured), one row inserted per task. The bench
publishes the backlog first, then starts the worker, and times the drain from
the first task's write to the last one's (the database's clock, as for
ledgerq's drains; Celery's start-up is not counted).

Celery is not a dependency of ledgerq: it comes with the dev extra. Without it
``--peer celery`` says so in one line before anything runs.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from sqlalchemy import Engine

from ledgerq.bench.peer_sql import Q
from ledgerq.bench.phases import Progress
from ledgerq.compose.storage import libpq_url
from ledgerq.core.config import Settings
from ledgerq.core.errors import ConfigError


class PeerUnavailableError(ConfigError):
    """``bench --peer celery`` was asked for, and Celery is not installed."""


def require_celery() -> None:
    if importlib.util.find_spec("celery") is None:
        raise PeerUnavailableError(
            "bench --peer celery needs Celery, which is not installed: "
            "pip install 'ledgerq[dev]' (or run bench without --peer)"
        )


def pgqueuer_installed() -> bool:
    return importlib.util.find_spec("pgqueuer") is not None


class PgqueuerPeer:
    """pgqueuer draining ``n`` no-op jobs in a child process (:mod:`.pgqueuer_app`),
    in the bench database; its tables are dropped again afterwards."""

    def __init__(self, settings: Settings, log_dir: Path) -> None:
        self.url = libpq_url(settings.database_url)
        self.log_dir = log_dir

    def drain(self, n: int, report: Progress) -> float:
        self.log_dir.mkdir(exist_ok=True)
        with (self.log_dir / "pgqueuer.log").open("ab") as log:
            done = subprocess.run(
                [sys.executable, "-m", "ledgerq.bench.pgqueuer_app", str(n), self.url],
                stdout=subprocess.PIPE,
                stderr=log,
                timeout=max(120.0, n / 50),
                check=False,
            )
        if done.returncode != 0:
            raise RuntimeError(f"the pgqueuer peer failed; see {self.log_dir}/pgqueuer.log")
        report(n, n)
        return float(json.loads(done.stdout)["per_s"])


class CeleryPeer:
    def __init__(self, settings: Settings, engine: Engine, log_dir: Path) -> None:
        self.engine = engine
        self.log_dir = log_dir
        self.queue = f"{settings.amqp_prefix}.celery"
        self.env = {
            **os.environ,
            "LEDGERQ_BENCH_CELERY_BROKER": settings.amqp_url,
            "LEDGERQ_BENCH_CELERY_QUEUE": self.queue,
            "LEDGERQ_BENCH_CELERY_DB": libpq_url(settings.database_url),
        }

    def drain(self, n: int, report: Progress) -> float:
        """Publish ``n`` tasks, start a Celery worker, time the drain; tasks/s."""
        with self.engine.begin() as conn:
            conn.execute(Q.create_table)
            conn.execute(Q.reset)
        self._publish(n)
        self.log_dir.mkdir(exist_ok=True)
        with (self.log_dir / "celery.log").open("ab") as log:
            worker = subprocess.Popen(
                [
                    *(sys.executable, "-m", "celery", "-A", "ledgerq.bench.celery_app"),
                    *("worker", "--pool", "prefork", "--concurrency", "2", "-Q", self.queue),
                    *("--without-heartbeat", "--without-gossip", "--without-mingle"),
                    *("--loglevel", "WARNING"),
                ],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            deadline = time.monotonic() + max(120.0, n / 50)
            while (done := self._count()) < n:
                report(done, n)
                if worker.poll() is not None:
                    raise RuntimeError(f"the Celery worker exited early; see {self.log_dir}/")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"Celery finished only {done}/{n} tasks")
                time.sleep(0.25)
            report(n, n)
        finally:
            worker.terminate()
            try:
                worker.wait(30)
            except subprocess.TimeoutExpired:
                worker.kill()
                worker.wait()
        with self.engine.connect() as conn:
            count, span = conn.execute(Q.drain_span).one()
        return (int(count) - 1) / float(span) if span else 0.0

    def _count(self) -> int:
        with self.engine.connect() as conn:
            return int(conn.execute(Q.count).scalar_one())

    def _publish(self, n: int) -> None:
        """Enqueue the backlog the way a Celery application does (``apply_async``)."""
        saved = dict(os.environ)
        os.environ.update(self.env)  # the app reads its broker and queue at import
        try:
            from ledgerq.bench import celery_app
        finally:
            os.environ.clear()
            os.environ.update(saved)
        app = celery_app.app
        app.conf.broker_url = self.env["LEDGERQ_BENCH_CELERY_BROKER"]
        with app.connection_for_write() as connection:
            queue = app.amqp.queues[self.queue](connection.default_channel)  # Celery's own
            queue.declare()
            queue.purge()  # what an interrupted run left
            producer = app.amqp.Producer(connection)
            for i in range(n):
                celery_app.write.apply_async((i,), queue=self.queue, producer=producer)
