"""Checkpoints and progress reports: what a long handler leaves behind for the
next attempt, and for the people watching it.

``ctx.save_checkpoint(state)`` stores ``state`` (JSON) at once, fenced by the
attempt's (id, epoch): an attempt the reconciler has already given up on (its
lease expired; the task runs elsewhere now) is refused, so it can never
overwrite the checkpoint of the attempt that replaced it; the handler then gets
:class:`~ledgerq.LeaseLostError` and should stop. The next attempt finds the last
stored state in ``ctx.checkpoint``. It is stored by the worker's own connection
in autocommit, independent of the handler's ``ctx.session`` transaction, so a
crash after it keeps it. One exception: a handler running in a batched window
(consumers.batch) stores it on the window's connection, because the window holds
the task's row locked until its COMMIT; it is then durable with the window (a
few tens of milliseconds later), and the kind leaves the batch, so its later
runs store checkpoints at once.

``ctx.report_progress(done, total=None, message=None)`` costs no statement: the
report waits in the worker's lease keeping and the next heartbeat writes the
latest one with the lease it extends (within ``--heartbeat`` seconds). Reports
between two beats replace each other.

Races: a sync handler's checkpoint is stored by the worker's event loop while the
handler's thread waits for it; progress reports are a dict assignment, safe from
any thread.
"""

from __future__ import annotations

import asyncio
import json
import math
from datetime import UTC, datetime
from typing import Any, Protocol

from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.model import Fence

#: The longest progress message stored (longer ones are cut).
MAX_PROGRESS_MESSAGE = 500
#: The largest checkpoint stored, as JSON text.
MAX_CHECKPOINT_BYTES = 1_000_000


class LeaseLostError(LedgerqError):
    """This attempt no longer holds its task (its lease expired and the task was
    given to another attempt): its checkpoint was refused, and its writes will not
    commit. Stop the handler; the task goes on elsewhere."""


class Keeper(Protocol):
    """The worker's lease keeping, as a context sees it (consumers.leases)."""

    loop: asyncio.AbstractEventLoop | None

    def progress(self, fence: Fence, report: str) -> None: ...

    async def save(self, fence: Fence, state_json: str) -> bool: ...


def checkpoint_json(state: Any) -> str:
    """``state`` as JSON text, or ValueError saying why it cannot be stored."""
    try:
        text = json.dumps(state, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"a checkpoint must be JSON (dicts, lists, str, numbers): {exc}") from None
    if len(text.encode()) > MAX_CHECKPOINT_BYTES:
        raise ValueError(
            f"a checkpoint of {len(text.encode())} bytes is over the limit of "
            f"{MAX_CHECKPOINT_BYTES}: store the bulk elsewhere and checkpoint where it is"
        )
    return text


def progress_json(done: float, total: float | None, message: str | None) -> str:
    """A progress report as stored, or ValueError for figures that make no sense."""
    for name, value in (("done", done), ("total", total)):
        if value is None and name == "total":
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"progress {name} must be a number, got {value!r}")
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"progress {name} must be finite and >= 0, got {value!r}")
    if message is not None and not isinstance(message, str):
        raise ValueError(f"progress message must be text, got {type(message).__name__}")
    return json.dumps(
        {
            "done": done,
            "total": total,
            "message": message[:MAX_PROGRESS_MESSAGE] if message else message,
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
        },
        separators=(",", ":"),
    )


def refused(task_id: int) -> LeaseLostError:
    return LeaseLostError(
        f"task {task_id}: its checkpoint was refused: this attempt no longer holds the task "
        "(its lease expired and it was given to another attempt); stop the handler"
    )
