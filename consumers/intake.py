"""Deliveries in: each one either names a task (an :class:`Arrival` for the
claimer) or is rejected to the dead-letter queue, at once.

A body that is not ``{"id": <int>, "epoch": <int>}`` (with an optional
``"alone": true`` for a suspect, see ``relay/reconciler.py``) can never be claimed;
holding it would hold a prefetch slot forever (and, on a channel whose acks are
coalesced, hold back the acks of every later delivery), so it is rejected (not
requeued) and logged on one ERROR line with the reason and the first bytes of the
body.

Decoding never raises. A task message is tiny (``{"id":…,"epoch":…}``, under 80
bytes), so a body over :data:`MAX_BODY_BYTES` is refused before it is parsed; a
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

from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Arrival
from ledgerq.ledger.model import Fence
from ledgerq.relay.broker.base import Delivery
from ledgerq.relay.probes import Probe, no_probe

log = logging.getLogger("ledgerq.worker")

MAX_BIGINT = 2**63 - 1
#: The largest body Intake will parse. The relay's bodies are under 80 bytes.
MAX_BODY_BYTES = 1024
#: How much of a refused body the log line shows.
LOGGED_BODY_BYTES = 120


@dataclass(frozen=True, slots=True)
class TaskMessage:
    """What a task message says: the (id, epoch) it names, and whether the task is
    a suspect to be run alone (``"alone": true``; any other value means no)."""

    fence: Fence
    alone: bool = False


def decode_fence(body: bytes, max_bytes: int = MAX_BODY_BYTES) -> Fence | str:
    """``(id, epoch)`` from a message body, or the reason it names no task. Never raises."""
    message = decode_message(body, max_bytes)
    return message if isinstance(message, str) else message.fence


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
    task_id, epoch = data.get("id"), data.get("epoch")
    if type(task_id) is not int or type(epoch) is not int:
        return "body does not hold an integer 'id' and 'epoch'"
    if not (1 <= task_id <= MAX_BIGINT and 0 <= epoch <= MAX_BIGINT):
        return "body's 'id' or 'epoch' is out of range"
    return TaskMessage((task_id, epoch), data.get("alone") is True)


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
            self.acker.received(delivery)
        except Exception:
            # Its channel is already gone: its tag cannot be settled, and the
            # broker redelivers it on a new channel.
            log.exception("could not take delivery %r in; the broker redelivers it", delivery)
            return
        try:
            message = decode_message(delivery.body, self.max_body_bytes)
            if isinstance(message, str):
                await self._reject(delivery, message)
                return
            self.probe("worker.after_receive")
            self.deliver(Arrival(message.fence, delivery, message.alone))
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
