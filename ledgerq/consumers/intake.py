"""Deliveries in: each one either names tasks (one :class:`Arrival` per task for
the claimer, all sharing the delivery) or is rejected to the dead-letter queue,
at once.

A body is ``{"id": <int>, "epoch": <int>}`` (with an optional ``"alone": true``
for a suspect, see ``relay/reconciler.py``), or an envelope of several tasks,
``{"tasks": [[<id>, <epoch>], ...]}`` (relay/envelopes.py). The acker is told how
many tasks the delivery carries and settles it once all of them are (acked when
every one is terminal). Any other body can never be claimed;
holding it would hold a prefetch slot forever (and, on a channel whose acks are
coalesced, hold back the acks of every later delivery), so it is rejected (not
requeued) and logged on one ERROR line with the reason and the first bytes of the
body.

Decoding never raises. A task message is small (``{"id":…,"epoch":…}`` is under
80 bytes, an envelope of :data:`MAX_ENVELOPE` tasks under 12 KiB), so a body over
:data:`MAX_BODY_BYTES` is refused before it is parsed; a
body that is not UTF-8, not JSON, nested too deep for the decoder
(``RecursionError``) or of the wrong shape is refused with its reason. Anything
that still goes wrong while taking a delivery in (a bug of ours, a channel that
closed under us) is logged and the delivery rejected if it can be: the broker's
consumer callback never sees an exception, which would leave the delivery
unsettled for good.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass

from ledgerq.broker.base import Delivery
from ledgerq.broker.topology import MAX_ENVELOPE
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Arrival
from ledgerq.hooks.probes import Probe, no_probe
from ledgerq.ledger.model import Fence

log = logging.getLogger("ledgerq.worker")

MAX_BIGINT = 2**63 - 1
#: The largest body Intake will parse: an envelope of MAX_ENVELOPE tasks fits.
MAX_BODY_BYTES = 16 * 1024
#: How much of a refused body the log line shows.
LOGGED_BODY_BYTES = 120


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """What a task message says: the (id, epoch) of each task it names (one, or an
    envelope's), and whether its one task is a suspect to be run alone
    (``"alone": true``; any other value means no)."""

    fences: tuple[Fence, ...]
    alone: bool = False

    @property
    def fence(self) -> Fence:
        return self.fences[0]


def decode_fence(body: bytes, max_bytes: int = MAX_BODY_BYTES) -> Fence | str:
    """``(id, epoch)`` from a one-task message body, or the reason it names no
    single task. Never raises."""
    message = decode_message(body, max_bytes)
    if isinstance(message, str):
        return message
    return message.fence if len(message.fences) == 1 else "body is an envelope"


def _fence(task_id: object, epoch: object) -> Fence | str:
    if type(task_id) is not int or type(epoch) is not int:
        return "an 'id' or 'epoch' that is not an integer"
    if not (1 <= task_id <= MAX_BIGINT and 0 <= epoch <= MAX_BIGINT):
        return "an 'id' or 'epoch' out of range"
    return (task_id, epoch)


def decode_message(body: bytes, max_bytes: int = MAX_BODY_BYTES) -> TaskMessage | str:
    """A :class:`TaskMessage` from a message body, or the reason it names no task.
    Never raises."""
    if len(body) > max_bytes:
        return f"body is {len(body)} bytes, over the {max_bytes}-byte limit of a task message"
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"body is not UTF-8 ({exc.reason} at byte {exc.start})"
    try:
        data = json.loads(text)
    except RecursionError:
        return "body is JSON nested too deeply to decode"
    except ValueError as exc:
        return f"body is not JSON ({str(exc).splitlines()[0]})"
    if not isinstance(data, dict):
        return f"body is a JSON {type(data).__name__}, not an object"
    if "tasks" in data:
        return _envelope(data["tasks"])
    fence = _fence(data.get("id"), data.get("epoch"))
    if isinstance(fence, str):
        return f"body does not hold an integer 'id' and 'epoch' in range ({fence})"
    return TaskMessage((fence,), data.get("alone") is True)


def _envelope(tasks: object) -> TaskMessage | str:
    if not isinstance(tasks, list) or not 1 <= len(tasks) <= MAX_ENVELOPE:
        return f"envelope's 'tasks' is not a list of 1 to {MAX_ENVELOPE} [id, epoch] pairs"
    fences: list[Fence] = []
    for pair in tasks:
        if not isinstance(pair, list) or len(pair) != 2:
            return "envelope holds something other than an [id, epoch] pair"
        fence = _fence(pair[0], pair[1])
        if isinstance(fence, str):
            return f"envelope holds {fence}"
        fences.append(fence)
    if len(set(fences)) != len(fences):
        return "envelope names one task twice"
    return TaskMessage(tuple(fences))


def parse_fence(body: bytes) -> Fence | None:
    """``(id, epoch)`` from a message body, or None if it is not one of ours."""
    fence = decode_fence(body)
    return None if isinstance(fence, str) else fence


def _excerpt(body: bytes) -> str:
    shown = repr(body[:LOGGED_BODY_BYTES])
    return shown if len(body) <= LOGGED_BODY_BYTES else f"{shown}... ({len(body)} bytes)"


class Intake:
    def __init__(
        self,
        acker: Acker,
        deliver: Callable[[Arrival], None],
        probe: Probe = no_probe,
        *,
        max_body_bytes: int = MAX_BODY_BYTES,
    ) -> None:
        self.acker = acker
        self.deliver = deliver
        self.probe = probe
        self.max_body_bytes = max_body_bytes
        self.received = 0
        self.rejected = 0

    async def __call__(self, delivery: Delivery) -> None:
        """Take one delivery in. Never raises (see the module docstring)."""
        self.received += 1
        try:
            message = decode_message(delivery.body, self.max_body_bytes)
        except Exception as exc:  # never expected: decoding does not raise
            message = f"worker error while decoding it: {exc!r}"
        parts = 1 if isinstance(message, str) else len(message.fences)
        try:
            self.acker.received(delivery, parts)
        except Exception:
            # Its channel is already gone: its tag cannot be settled, and the
            # broker redelivers it on a new channel.
            log.exception("could not take delivery %r in; the broker redelivers it", delivery)
            return
        try:
            if isinstance(message, str):
                await self._reject(delivery, message)
                return
            self.probe("worker.after_receive")
            for fence in message.fences:
                self.deliver(Arrival(fence, delivery, message.alone))
        except Exception as exc:  # a bug of ours: the delivery must still be settled
            log.exception("taking delivery %r in failed unexpectedly", delivery)
            await self._reject(delivery, f"worker error while taking it in: {exc!r}")

    async def _reject(self, delivery: Delivery, reason: str) -> None:
        self.rejected += 1
        try:
            message_id, body = delivery.message_id, _excerpt(delivery.body)
        except Exception:
            message_id, body = None, "(unreadable)"
        log.error(
            "rejecting a message to the dead-letter queue: %s (message_id=%r, body=%s)",
            reason,
            message_id,
            body,
        )
        await self.acker.reject([delivery], requeue=False)
