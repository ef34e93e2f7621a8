"""Envelopes, unit by unit: how the relay cuts a batch into messages
(relay/envelopes.py), how the worker reads one (consumers/intake.py), and how
the acker settles a message that carries several tasks (consumers/acker.py):
once, when the last of its tasks is settled, acked or requeued, never twice."""

from __future__ import annotations

import json

import pytest

from ledgerq.broker.topology import MAX_ENVELOPE, Topology, envelope_body
from ledgerq.consumers.acker import Acker
from ledgerq.consumers.handoff import Arrival
from ledgerq.consumers.intake import Intake, decode_message
from ledgerq.ledger.model import DueTask
from ledgerq.relay.envelopes import KindDurations, pack
from tests.unit.test_intake_hardening import Channel, good


def due(task_id: int, kind: str = "k", route: str | None = "r", **kw: object) -> DueTask:
    return DueTask(task_id, kind, "q", 0, 0, route=route, **kw)  # type: ignore[arg-type]


# -- pack -------------------------------------------------------------------------


def test_pack_cuts_a_route_into_envelopes_of_at_most_the_limit() -> None:
    envelopes = pack([due(i) for i in range(1, 21)], limit=8)
    assert [len(e) for e in envelopes] == [8, 8, 4]
    assert [t.id for e in envelopes for t in e] == list(range(1, 21))  # order kept


def test_pack_shares_a_route_among_its_live_subscribers() -> None:
    # six tasks, two workers on the route: two envelopes of three, one each
    envelopes = pack([due(i, subscribers=2) for i in range(1, 7)], limit=16)
    assert [len(e) for e in envelopes] == [3, 3]


def test_pack_never_mixes_routes_or_kinds() -> None:
    rows = [due(1), due(2, kind="other"), due(3, route="s"), due(4), due(5, kind="other")]
    envelopes = pack(rows, limit=16)
    assert {tuple(t.id for t in e) for e in envelopes} == {(1, 4), (2, 5), (3,)}
    for envelope in envelopes:
        assert len({(t.route, t.kind) for t in envelope}) == 1
    # each envelope stands where its first task was picked
    assert [e[0].id for e in envelopes] == [1, 2, 3]


def test_suspects_and_long_kinds_travel_alone() -> None:
    rows = [due(1), due(2, suspect=True), due(3), due(4, kind="slow"), due(5, kind="slow")]
    envelopes = pack(rows, limit=16, alone=frozenset({"slow"}))
    assert sorted(tuple(t.id for t in e) for e in envelopes) == [(1, 3), (2,), (4,), (5,)]


def test_a_limit_of_one_sends_one_task_per_message() -> None:
    assert pack([due(i) for i in range(1, 4)], limit=1) == [(due(1),), (due(2),), (due(3),)]


def test_an_envelope_message_names_every_task_and_its_highest_priority() -> None:
    rows = (DueTask(7, "k", "q", 2, 3, route="r"), DueTask(9, "k", "q", 5, 1, route="r"))
    message = Topology("p").message(rows)
    assert json.loads(message.body) == {"tasks": [[7, 3], [9, 1]]}
    assert (message.message_id, message.priority, message.routing_key) == ("7+1", 5, "q@r")
    single = Topology("p").message(rows[:1])
    assert json.loads(single.body) == {"id": 7, "epoch": 3} and single.message_id == "7"


async def test_kind_durations_name_the_long_kinds_and_keep_the_last_answer_on_error() -> None:
    answers: list[dict[str, float] | Exception] = [{"fast": 0.01, "slow": 3.0}, OSError("gone")]

    async def read() -> dict[str, float]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    durations = KindDurations(read, long_s=1.0, every_s=0.0)
    assert await durations.refresh() == {"slow"}
    assert await durations.refresh() == {"slow"}  # the read failed: the hint stands


# -- intake -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ({"tasks": []}, "not a list of 1 to"),
        ({"tasks": [[1, 0]] * (MAX_ENVELOPE + 1)}, "not a list of 1 to"),
        ({"tasks": [[1, 0], [1, 0]]}, "names one task twice"),
        ({"tasks": [[1, 0, 2]]}, "other than an [id, epoch] pair"),
        ({"tasks": [[1, "0"]]}, "not an integer"),
        ({"tasks": [[0, 0]]}, "out of range"),
        ({"tasks": {"1": 0}}, "not a list"),
    ],
)
def test_a_malformed_envelope_is_refused_with_its_reason(body: object, reason: str) -> None:
    decoded = decode_message(json.dumps(body).encode())
    assert isinstance(decoded, str) and reason in decoded


async def test_an_envelope_arrives_as_one_arrival_per_task_sharing_its_delivery() -> None:
    channel, acker, arrivals = Channel(), Acker(), list[Arrival]()
    intake = Intake(acker, arrivals.append)
    await intake(channel.deliver(envelope_body([(4, 1), (5, 0), (6, 2)])))
    assert [a.fence for a in arrivals] == [(4, 1), (5, 0), (6, 2)]
    assert len({id(a.delivery) for a in arrivals}) == 1 and channel.settled == {}


# -- acker ------------------------------------------------------------------------


async def test_an_envelope_is_acked_once_when_its_last_task_is_finished() -> None:
    channel, acker = Channel(), Acker(max_delay_s=0.01)
    envelope, single = channel.deliver(b"e"), channel.deliver(good(9))
    acker.received(envelope, 3)
    acker.received(single)
    await acker.finished([single])  # waits behind the envelope's tag (the prefix)
    await acker.finished([envelope, envelope])  # two of its three tasks
    assert channel.settled == {}
    await acker.finished([envelope])
    assert channel.settled == {1: "acked", 2: "acked"}
    assert channel.sent == [("acked", 2, True)]  # one multiple ack, each tag once


async def test_an_envelope_whose_claim_failed_in_part_is_requeued_when_the_rest_finish() -> None:
    channel, acker = Channel(), Acker()
    envelope = channel.deliver(b"e")
    acker.received(envelope, 2)
    await acker.reject([envelope], requeue=True)  # one task's claim failed
    assert channel.settled == {}
    await acker.finished([envelope])  # the other one finished meanwhile
    assert channel.settled == {1: "requeued"}
