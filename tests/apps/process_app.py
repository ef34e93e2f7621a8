"""Handlers for the ``--processes`` tests (tests/faults/test_processes.py):
``ledgerq worker --processes N --app tests.apps.process_app``.

Sync handlers, each writing to files under ``payload["dir"]`` so the test sees
what ran, in which process, and whether a line ran after a timeout:

- ``proc.work`` sleeps ``payload["seconds"]``, then appends ``pid`` to
  ``<dir>/<task id>.done`` (a task that ran to its end once has one line);
- ``proc.hang`` (timeout 1 s) appends ``<dir>/<task id>.started``, sleeps
  ``payload["seconds"]``, then appends the marker ``<dir>/<task id>.after``: under
  ``--processes`` the marker never appears.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from ledgerq import TaskContext, task


def _append(path: Path, line: str) -> None:
    with path.open("a") as out:
        out.write(line + "\n")


@task("proc.work")
def work(payload: Any, ctx: TaskContext) -> None:
    time.sleep(float(payload.get("seconds", 0.0)))
    _append(Path(payload["dir"]) / f"{ctx.id}.done", str(os.getpid()))


@task("proc.hang", timeout=1)
def hang(payload: Any, ctx: TaskContext) -> None:
    _append(Path(payload["dir"]) / f"{ctx.id}.started", f"{os.getpid()} {ctx.attempt}")
    time.sleep(float(payload.get("seconds", 3.0)))
    _append(Path(payload["dir"]) / f"{ctx.id}.after", f"{os.getpid()} {ctx.attempt}")
