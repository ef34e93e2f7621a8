"""The acker's choice of tags, on stand-in deliveries that record what is sent.

This is the pure bookkeeping (which tag, multiple or not, in what order); the
broker's side of acks is exercised by the integration and fault suites."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from ledgerq.consumers.acker import Acker


class Channel:
    def __init__(self) -> None:
        self.sent: list[tuple[int, bool]] = []
        self.settled: set[int] = set()

    def record(self, tag: int, multiple: bool) -> None:
        # What RabbitMQ enforces: the named tag must be outstanding.
        assert tag not in self.settled, f"tag {tag} acked twice (the broker would close us)"
        self.sent.append((tag, multiple))
        if multiple:
            self.settled |= {t for t in range(1, tag + 1)}
        else:
            self.settled.add(tag)


class Delivery:
    def __init__(self, channel: Channel, tag: int) -> None:
        self.channel = channel
        self.delivery_tag = tag
        self.message_id = str(tag)

    async def ack(self, multiple: bool = False) -> None:
        await asyncio.sleep(0)  # a real ack yields to the loop too
        self.channel.record(self.delivery_tag, multiple)

    async def reject(self, requeue: bool = False) -> None:
        await asyncio.sleep(0)
        self.channel.record(self.delivery_tag, False)


def deliveries(channel: Channel, n: int) -> list[Any]:
    return [Delivery(channel, tag) for tag in range(1, n + 1)]


def test_a_finished_prefix_is_one_multiple_ack() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    batch = deliveries(channel, 5)
    for d in batch:
        acker.received(d)
    asyncio.run(acker.finished([batch[2], batch[0], batch[1]]))
    assert channel.sent == [(3, True)]
    asyncio.run(acker.finished([batch[4]]))  # 4 is still running: 5 waits
    assert channel.sent == [(3, True)]
    asyncio.run(acker.finished([batch[3]]))
    assert channel.sent == [(3, True), (5, True)]


def test_too_many_waiting_are_acked_one_by_one_then_skipped_in_the_prefix() -> None:
    channel, acker = Channel(), Acker(max_waiting=2)
    batch = deliveries(channel, 6)
    for d in batch:
        acker.received(d)
    asyncio.run(acker.finished(batch[1:5]))  # 1 holds the prefix; 4 waiting > 2
    assert sorted(channel.sent) == [(2, False), (3, False), (4, False), (5, False)]
    asyncio.run(acker.finished([batch[0], batch[5]]))
    assert channel.sent[-1] == (6, True)


def test_rejected_deliveries_do_not_hold_the_prefix() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    batch = deliveries(channel, 3)
    for d in batch:
        acker.received(d)
    asyncio.run(acker.reject([batch[0]], requeue=True))
    asyncio.run(acker.finished([batch[1], batch[2]]))
    assert channel.sent == [(1, False), (3, True)]


def test_out_of_order_tags_stop_coalescing() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    first: Any = Delivery(channel, 2)
    second: Any = Delivery(channel, 1)
    acker.received(first)
    acker.received(second)  # tag 1 after tag 2: never from RabbitMQ, handled anyway
    asyncio.run(acker.finished([first]))
    asyncio.run(acker.finished([second]))
    assert channel.sent == [(2, False), (1, False)]


def test_concurrent_callers_never_ack_a_tag_twice_or_out_of_order() -> None:
    rng = random.Random(7)
    channel, acker = Channel(), Acker(max_waiting=5)
    batch = deliveries(channel, 300)
    for d in batch:
        acker.received(d)
    order = batch[:]
    rng.shuffle(order)
    chunks = []
    while order:
        size = rng.randint(1, 9)
        chunks.append(order[:size])
        del order[:size]

    async def main() -> None:
        await asyncio.gather(*(acker.finished(chunk) for chunk in chunks))

    asyncio.run(main())  # Channel.record asserts on any double ack
    assert channel.settled == set(range(1, 301))
