"""Start and stop ledgerq's own services as child processes (used by demo and bench)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from ledgerq.ledger.config import Settings


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
