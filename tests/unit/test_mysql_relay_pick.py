"""The MySQL relay's window arithmetic (ledger/mysql/relay_pick.py), without a
server: which routes have room, and which candidates a batch keeps."""

from __future__ import annotations

from datetime import datetime, timedelta

from ledgerq.ledger.model import DueTask
from ledgerq.ledger.mysql.relay_pick import Candidate, Window, kept, open_windows

T0 = datetime(2026, 11, 28, 12, 0, 0)


def _window(route: str = "", credit: int = 10, subscribers: int = 1) -> Window:
    return Window("default", route, None, None, frozenset(), credit, subscribers)


def _candidate(
    window: Window,
    id_: int,
    *,
    priority: int = 0,
    attempts: int = 0,
    aged: bool = False,
    kind: str = "k",
) -> Candidate:
    run_at = T0 + timedelta(seconds=id_)
    return Candidate(window, id_, kind, priority, 0, False, None, attempts, run_at, aged)


def test_a_window_has_its_capacity_less_its_published_rows_as_credit() -> None:
    routes = [
        ("default", "", None, None, 10, 2, 4, None),
        ("default", "r-1", '["a", "b"]', "[1]", 3, 1, 3, None),  # full: no window
        ("other", "", None, None, 5, 1, 0, None),
        ("other", "s-1", None, None, 2, 1, 1, "w-1"),  # a personal route
    ]
    windows = open_windows(routes, [])
    assert windows == [
        Window("default", "", None, None, frozenset(), 6, 2),
        Window("other", "", None, None, frozenset(), 5, 1),
        Window("other", "s-1", None, None, frozenset(), 1, 1, "w-1"),
    ]


def test_direct_workers_take_their_kinds_out_and_a_whole_queue_away() -> None:
    routes = [
        ("default", "", None, None, 10, 1, 0, None),
        ("other", "", None, None, 10, 1, 0, None),
    ]
    direct = [("default", '["a"]'), ("default", '["b"]'), ("other", None)]
    [window] = open_windows(routes, direct)
    assert (window.queue, window.excluded) == ("default", frozenset({"a", "b"}))


def test_a_route_lists_its_kinds_and_shards() -> None:
    [window] = open_windows([("q", "r-1", '["b", "a"]', "[2, 0]", 4, 1, 0, None)], [])
    assert (window.kinds, window.shards) == (frozenset({"a", "b"}), frozenset({0, 2}))


def test_the_batch_keeps_the_rules_order_aged_first_retries_behind() -> None:
    w = _window()
    picked = kept(
        [
            _candidate(w, 1, priority=0),
            _candidate(w, 2, priority=5, attempts=1),
            _candidate(w, 3, priority=5),
            _candidate(w, 4, priority=0, aged=True),
            _candidate(w, 5, priority=9, aged=True),
        ],
        10,
    )
    assert [c.id for c in picked] == [4, 5, 3, 2, 1]  # aged by due time, whatever priority
    assert [c.due_task().priority for c in picked] == [9, 9, 5, 5, 0]


def test_each_window_keeps_at_most_its_credit_and_the_batch_its_limit() -> None:
    small, large = _window("r-s", credit=1), _window("r-l", credit=5)
    candidates = [_candidate(small, i) for i in (1, 2)] + [_candidate(large, i) for i in (3, 4)]
    assert [c.id for c in kept(candidates, 10)] == [1, 3, 4]
    assert [c.id for c in kept(candidates, 2)] == [1, 3]


def test_a_row_two_windows_cover_goes_to_the_one_with_more_credit() -> None:
    narrow, wide = _window("r-n", credit=1, subscribers=3), _window("", credit=4)
    [only] = kept([_candidate(narrow, 7), _candidate(wide, 7)], 10)
    assert only.due_task() == DueTask(7, "k", "default", 0, 0, False, None, None, 1)
    [again] = kept([_candidate(wide, 7), _candidate(narrow, 7)], 10)  # whatever the order read
    assert again.window == wide


def test_a_rate_limited_kind_keeps_at_most_its_whole_tokens_across_windows() -> None:
    a, b = _window("a"), _window("b")
    candidates = [_candidate(a, 1, kind="m"), _candidate(b, 2, kind="m"), _candidate(a, 3)]
    candidates += [_candidate(b, 4, kind="m"), _candidate(b, 5)]
    picked = kept(candidates, 10, {"m": 2})
    assert [c.id for c in picked] == [1, 2, 3, 5]  # the third "m" waits; the others go
    assert [c.id for c in kept(candidates, 10, {"m": 0})] == [3, 5]
