"""Start and stop ledgerq's own services as child processes (used by demo and bench),
and the child's side of ``ledgerq worker --processes N`` (:mod:`ledgerq.compose.supervisor`).

A supervised child is an ordinary ``ledgerq worker`` started with
:data:`SUPERVISED_ENV` naming a report file. Its hang limit is then
:data:`HARD_STOP_S` (a sync handler past its timeout ends the child at once,
exit 70, consumers/hung.py) and :func:`report_hung` copies the one critical
line the worker logs as it ends into that file, so the supervisor knows which
task it was (the line names it: ``task <id> (<kind>) attempt <n>: ...``), and
:func:`watch_parent` stops it (SIGTERM: it drains) if the supervisor dies.
:func:`child_argv` is the supervisor's command line minus the options that are
the supervisor's own (:func:`without_options`, which the Django command uses too).
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ledgerq.core.config import Settings

#: Set in a supervised child's environment: the file its hung-handler line goes to.
SUPERVISED_ENV = "LEDGERQ_SUPERVISED_REPORT"
#: A supervised child's hang limit: a sync handler past its timeout ends its process
#: as soon as the worker's watchdog fires (milliseconds), and the child is replaced.
HARD_STOP_S = 0.001
#: The supervisor's own options, never passed to a child (with their value).
SUPERVISOR_OPTIONS = ("--processes", "--metrics-port")


def service_env(settings: Settings) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        LEDGERQ_DATABASE_URL=settings.database_url,
        LEDGERQ_AMQP_URL=settings.amqp_url,
        LEDGERQ_AMQP_PREFIX=settings.amqp_prefix,
    )
    return env


@dataclass
class Services:
    """A relay and N workers running as ``python -m ledgerq ...`` children."""

    settings: Settings
    log_dir: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _logs: list[IO[bytes]] = field(default_factory=list)

    def start(self, name: str, args: Sequence[str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("wb")
        self._logs.append(log)
        proc = subprocess.Popen(
            [sys.executable, "-m", "ledgerq", "-v", *args],
            env=service_env(self.settings),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        self.procs.append(proc)
        return proc

    def stop(self, timeout: float = 60.0) -> list[int]:
        """SIGTERM everything, wait, and return the exit codes (killing stragglers)."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = []
        for proc in self.procs:
            try:
                codes.append(proc.wait(timeout))
            except subprocess.TimeoutExpired:
                proc.kill()
                codes.append(proc.wait())
        for log in self._logs:
            log.close()
        return codes

    def dead(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is not None]


class _HungReport(logging.Handler):
    """Appends each critical line of the worker's logger to the report file, with
    one ``write`` (the process ends right after: consumers/hung.py's ``crash``)."""

    def __init__(self, path: str) -> None:
        super().__init__(logging.CRITICAL)
        self.path = path

    def emit(self, record: logging.LogRecord) -> None:
        line = record.getMessage().replace("\n", " ") + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


def report_hung(path: str) -> None:
    """In a supervised child: copy the worker's critical lines (the hung watchdog's)
    to ``path`` for the supervisor."""
    logging.getLogger("ledgerq.worker").addHandler(_HungReport(path))


def watch_parent(every_s: float = 1.0) -> None:
    """In a supervised child: SIGTERM itself (a graceful drain) once its supervisor
    is gone (it was SIGKILLed: the child was handed to another parent), so that no
    worker outlives its supervisor. A daemon thread that polls ``getppid``."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        logging.getLogger("ledgerq").warning("the supervisor is gone; stopping")
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="ledgerq-parent-watch", daemon=True).start()


def without_options(argv: Sequence[str], options: Sequence[str]) -> list[str]:
    """``argv`` minus each of ``options`` with its value (``--name V`` or ``--name=V``)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif not arg.startswith(tuple(f"{name}=" for name in options)):
            kept.append(arg)
    return kept


def child_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` (a ``ledgerq ... worker --processes N ...`` command line, without the
    program) minus :data:`SUPERVISOR_OPTIONS` and their values."""
    return without_options(argv, SUPERVISOR_OPTIONS)
