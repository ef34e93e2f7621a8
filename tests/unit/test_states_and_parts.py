from __future__ import annotations

import pytest

from ledgerq import Registry, RegistryError
from ledgerq.consumers.intake import parse_fence
from ledgerq.ledger.sql import Q, parse
from ledgerq.ledger.states import LIVE, TERMINAL, TRANSITIONS, Status, can_transition

#: ``ledgerq tasks retry``: a dead or cancelled task runs again.
OPERATOR_RETRY = {(Status.DEAD, Status.PENDING), (Status.CANCELLED, Status.PENDING)}


def test_terminal_states_have_no_way_out_but_an_operators_retry() -> None:
    for source, target in TRANSITIONS:
        if source in TERMINAL:
            assert (source, target) in OPERATOR_RETRY, (source, target)
    assert not can_transition(Status.SUCCEEDED, Status.PENDING)  # a success is final
    assert not can_transition(Status.SUCCEEDED, Status.RUNNING)
    assert can_transition(Status.PENDING, Status.RUNNING)  # the claim may beat the relay
    assert LIVE.isdisjoint(TERMINAL) and set(Status) == LIVE | TERMINAL
    assert all(s.terminal for s in TERMINAL) and not Status.RUNNING.terminal


def test_every_live_state_can_reach_a_terminal_state() -> None:
    for state in LIVE:
        seen, frontier = {state}, [state]
        while frontier:
            current = frontier.pop()
            for source, target in TRANSITIONS:
                if source == current and target not in seen:
                    seen.add(target)
                    frontier.append(target)
        assert seen & TERMINAL, state


def test_named_queries_parse_and_refuse_duplicates() -> None:
    assert "ledgerq_pick(" in str(Q.select_due)
    assert parse("-- name: a\nSELECT 1\n-- a comment\n-- name: b\nSELECT 2") == {
        "a": "SELECT 1",
        "b": "SELECT 2",
    }
    with pytest.raises(ValueError, match="twice"):
        parse("-- name: a\nSELECT 1\n-- name: a\nSELECT 2")


@pytest.mark.parametrize(
    ("body", "fence"),
    [
        (b'{"id": 5, "epoch": 0}', (5, 0)),
        (b'{"id": 5, "epoch": 3, "extra": 1}', (5, 3)),
        (b"not json", None),
        (b'{"id": "5", "epoch": 0}', None),
        (b'{"id": 0, "epoch": 0}', None),
        (b'{"id": 5}', None),
        (b"[1, 2]", None),
        (b'{"id": true, "epoch": 0}', None),
    ],
)
def test_parse_fence(body: bytes, fence: tuple[int, int] | None) -> None:
    assert parse_fence(body) == fence


def test_registry_checks_kind_signature_and_duplicates() -> None:
    registry = Registry()

    @registry.task("a.kind")
    def handler(payload: object, ctx: object) -> None:
        return None

    assert registry.get("a.kind") is not None and registry.kinds() == ["a.kind"]
    with pytest.raises(RegistryError, match="malformed"):
        registry.task("bad kind")
    with pytest.raises(RegistryError, match=r"must take \(payload, ctx\)"):
        registry.task("other")(lambda payload: None)
    with pytest.raises(RegistryError, match="already has a handler"):
        registry.task("a.kind")(lambda payload, ctx: None)
    with pytest.raises(RegistryError, match=r"^timeout must be positive, got 0$"):
        registry.task("b.kind", timeout=0)
    with pytest.raises(RegistryError, match=r"^max_runtime must be positive, got -1$"):
        registry.task("b.kind", max_runtime=-1)
    assert registry.kinds() == ["a.kind"]
