"""Acks that follow the commit, coalesced into ``multiple`` acks where that is safe.

A ``basic.ack`` with ``multiple=True`` settles every outstanding delivery up to
its tag on that channel, so it is only sent for a tag when every earlier
delivery on the channel is settled already or settled by this ack: the longest
finished prefix. Deliveries that finish out of order wait for the prefix; past
``max_waiting`` of them, or once one has waited ``max_delay_s`` (a long task,
or a delivery nothing will settle, holding the prefix back), they are acked one
by one, so prefetch never fills with finished work and a stuck tag never holds
back the acks of the deliveries behind it. A rejected delivery is settled on its
own and leaves the prefix at once, whether or not its reject could be sent. A
delivery from a channel that has closed is never acked: its tag means nothing
on the new one.

An envelope (one delivery carrying several tasks, relay/envelopes.py) is
settled once, when the last of its tasks is: acked when every one is finished;
requeued instead if the claim of any of them asked for a requeue (a failed
claim), because a tag can be settled only once and its redelivery claims only
what did not finish (the others' fences moved on). Until then it holds its
place in the prefix like any unfinished delivery.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from dataclasses import dataclass, field

from ledgerq.broker.base import BrokerConnectionError, Delivery

log = logging.getLogger("ledgerq.acker")


@dataclass
class _Channel:
    channel: object = None
    ordered: bool = True
    order: deque[int] = field(default_factory=deque)  # outstanding tags, delivery order
    finished: dict[int, Delivery] = field(default_factory=dict)
    settled: set[int] = field(default_factory=set)  # acked or rejected one by one
    timer: asyncio.TimerHandle | None = None  # acks the waiting ones after max_delay_s


class Acker:
    def __init__(self, max_waiting: int = 64, max_delay_s: float = 1.0) -> None:
        self.max_waiting = max_waiting
        self.max_delay_s = max_delay_s
        self._late: set[asyncio.Task[None]] = set()
        self._channels: dict[int, _Channel] = {}
        self._channel_of: dict[int, int] = {}  # id(delivery) -> id(its channel)
        #: id(envelope) -> [tasks not yet settled, whether one asked for a requeue]
        self._parts: dict[int, list[int | bool]] = {}
        self._lock = asyncio.Lock()
        self.acks_sent = 0

    def received(self, message: Delivery, parts: int = 1) -> None:
        """``message`` came in carrying ``parts`` tasks (an envelope: several); it is
        settled when all of them are."""
        self._received(message)
        if parts > 1:
            self._parts[id(message)] = [parts, False]

    def _last_part(self, message: Delivery, requeue: bool) -> tuple[bool, bool]:
        """Count one of ``message``'s tasks settled: whether that was its last, and
        whether the delivery is to be requeued rather than acked."""
        left = self._parts.get(id(message))
        if left is None:
            return True, requeue
        left[0] = int(left[0]) - 1
        left[1] = bool(left[1]) or requeue
        if left[0] > 0:
            return False, False
        del self._parts[id(message)]
        return True, bool(left[1])

    def _received(self, message: Delivery) -> None:
        # message.channel is valid now (it raises once the channel has closed). The
        # state keeps the channel object alive, so its id() is never reused for a
        # new channel while the state exists.
        channel = message.channel
        self._channel_of[id(message)] = id(channel)
        state = self._state(message)
        state.channel = channel
        tag = _tag(message)
        if state.order and tag < state.order[-1]:
            # Never expected (the broker numbers a channel's deliveries in order and
            # aio-pika hands them over in order); if it happens, stop coalescing.
            log.warning("delivery tag %s arrived after %s; acking one by one", tag, state.order[-1])
            state.ordered = False
        state.order.append(tag)

    async def reject(self, messages: list[Delivery], requeue: bool) -> None:
        """Reject (to the dead-letter exchange) or requeue, under the same lock as
        acks, and mark the tags settled only once the reject is sent. An envelope
        is rejected when its last task is settled (see the module docstring)."""
        async with self._lock:
            whole = []
            for message in messages:
                last, again = self._last_part(message, requeue)
                if last:
                    whole.append((message, again))
            await self._reject_each(whole)

    async def _reject_each(self, messages: list[tuple[Delivery, bool]]) -> None:
        touched: dict[int, _Channel] = {}
        for message, requeue in messages:
            touched[self._key(message)] = self._state(message)
            try:
                await message.reject(requeue=requeue)
            except BrokerConnectionError:
                log.info(
                    "could not reject %s: its channel is gone (the broker redelivers it)",
                    message.message_id,
                )
            except Exception:
                # Settled anyway: a tag nothing will settle must not hold the
                # prefix (a later multiple ack then acks it instead).
                log.exception("rejecting %s failed", message.message_id)
            self._state(message).settled.add(_tag(message))
            self._channel_of.pop(id(message), None)
        for key, state in touched.items():  # what waited behind a rejected tag goes now
            if state.finished and self._channels.get(key) is state:
                await self._flush(key, state)

    async def finished(self, messages: list[Delivery]) -> None:
        """These deliveries' outcomes are committed: ack them (coalescing when safe).
        An envelope is acked when its last task is (see the module docstring).

        Serialised: the state is read and the acks sent under one lock, so two
        callers can neither pick the same tag nor send a ``multiple`` ack for a
        lower tag after one for a higher tag (which would name a settled tag and
        make the broker close the channel)."""
        async with self._lock:
            touched: dict[int, _Channel] = {}
            requeued: list[tuple[Delivery, bool]] = []
            for message in messages:
                last, requeue = self._last_part(message, False)
                if not last:
                    continue
                if requeue:
                    requeued.append((message, True))
                    continue
                state = self._state(message)
                state.finished[_tag(message)] = message
                touched[self._key(message)] = state
            if requeued:
                await self._reject_each(requeued)
            for key, state in touched.items():
                await self._flush(key, state)

    async def _flush(self, key: int, state: _Channel) -> None:
        if not state.ordered:
            await self._ack_each(key, state)
            return
        last: Delivery | None = None
        while state.order and (state.order[0] in state.finished or state.order[0] in state.settled):
            tag = state.order.popleft()
            if tag in state.finished:
                last = state.finished.pop(tag)
                self._channel_of.pop(id(last), None)  # every popped delivery is forgotten
            else:
                state.settled.discard(tag)
        if last is not None:
            await self._ack(key, last, multiple=True)
        if len(state.finished) > self.max_waiting:
            await self._ack_each(key, state)
        elif state.finished and state.timer is None:
            state.timer = asyncio.get_running_loop().call_later(
                self.max_delay_s, self._start_late_flush, key, state
            )

    def _start_late_flush(self, key: int, state: _Channel) -> None:
        state.timer = None
        task = asyncio.create_task(self._late_flush(key, state))
        self._late.add(task)
        task.add_done_callback(self._late.discard)

    async def _late_flush(self, key: int, state: _Channel) -> None:
        """The prefix stayed stuck for ``max_delay_s``: ack the waiting ones on their own."""
        async with self._lock:
            if self._channels.get(key) is state and state.finished:
                await self._ack_each(key, state)

    async def _ack_each(self, key: int, state: _Channel) -> None:
        """Ack every finished delivery on its own (they leave the prefix as settled)."""
        for tag, message in list(state.finished.items()):
            del state.finished[tag]
            state.settled.add(tag)
            self._channel_of.pop(id(message), None)
            await self._ack(key, message, multiple=False)

    async def _ack(self, key: int, message: Delivery, multiple: bool) -> None:
        try:
            await message.ack(multiple=multiple)
            self.acks_sent += 1
        except BrokerConnectionError:
            log.info(
                "deliveries up to %s came on a channel that is gone; not acked (the "
                "broker redelivers them and the redeliveries are skipped)",
                message.message_id,
            )
            gone = self._channels.pop(key, None)
            if gone is not None and gone.timer is not None:
                gone.timer.cancel()
            for delivery, channel in list(self._channel_of.items()):
                if channel == key:
                    del self._channel_of[delivery]

    def _key(self, message: Delivery) -> int:
        return self._channel_of.get(id(message), 0)

    def _state(self, message: Delivery) -> _Channel:
        return self._channels.setdefault(self._key(message), _Channel())


def _tag(message: Delivery) -> int:
    return message.delivery_tag
