"""The acker's choice of tags, on stand-in deliveries that record what is sent.

This is the pure bookkeeping (which tag, multiple or not, in what order); the
broker's side of acks is exercised by the integration and fault suites."""

from __future__ import annotations

import asyncio
import json
import random

from ledgerq.broker.base import Delivery
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


class FakeDelivery:
    """Stands in for :class:`~ledgerq.broker.base.Delivery`."""

    def __init__(self, channel: Channel, tag: int) -> None:
        self.channel = channel
        self.delivery_tag = tag
        self.message_id: str | None = str(tag)
        self.body = json.dumps({"id": tag, "epoch": 0}).encode()

    async def ack(self, multiple: bool = False) -> None:
        await asyncio.sleep(0)  # a real ack yields to the loop too
        self.channel.record(self.delivery_tag, multiple)

    async def reject(self, requeue: bool) -> None:
        await asyncio.sleep(0)
        self.channel.record(self.delivery_tag, False)


def deliveries(channel: Channel, n: int) -> list[Delivery]:
    return [FakeDelivery(channel, tag) for tag in range(1, n + 1)]


async def test_a_finished_prefix_is_one_multiple_ack() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    batch = deliveries(channel, 5)
    for d in batch:
        acker.received(d)
    await acker.finished([batch[2], batch[0], batch[1]])
    assert channel.sent == [(3, True)]
    await acker.finished([batch[4]])  # 4 is still running: 5 waits
    assert channel.sent == [(3, True)]
    await acker.finished([batch[3]])
    assert channel.sent == [(3, True), (5, True)]


async def test_too_many_waiting_are_acked_one_by_one_then_skipped_in_the_prefix() -> None:
    channel, acker = Channel(), Acker(max_waiting=2)
    batch = deliveries(channel, 6)
    for d in batch:
        acker.received(d)
    await acker.finished(batch[1:5])  # 1 holds the prefix; 4 waiting > 2
    assert sorted(channel.sent) == [(2, False), (3, False), (4, False), (5, False)]
    await acker.finished([batch[0], batch[5]])
    assert channel.sent[-1] == (6, True)


async def test_rejected_deliveries_do_not_hold_the_prefix() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    batch = deliveries(channel, 3)
    for d in batch:
        acker.received(d)
    await acker.reject([batch[0]], requeue=True)
    await acker.finished([batch[1], batch[2]])
    assert channel.sent == [(1, False), (3, True)]


async def test_out_of_order_tags_stop_coalescing() -> None:
    channel, acker = Channel(), Acker(max_waiting=100)
    first: Delivery = FakeDelivery(channel, 2)
    second: Delivery = FakeDelivery(channel, 1)
    acker.received(first)
    acker.received(second)  # tag 1 after tag 2: never from RabbitMQ, handled anyway
    await acker.finished([first])
    await acker.finished([second])
    assert channel.sent == [(2, False), (1, False)]


async def test_concurrent_callers_never_ack_a_tag_twice_or_out_of_order() -> None:
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

    # Channel.record asserts on any double ack.
    await asyncio.gather(*(acker.finished(chunk) for chunk in chunks))
    assert channel.settled == set(range(1, 301))
