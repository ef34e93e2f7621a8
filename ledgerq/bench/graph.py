"""The graph drain (issue 27): a fan-out/fan-in backlog of tasks joined with ``after``.

``groups`` groups, each of ``width - 1`` no-op tasks and one no-op join enqueued
``after`` all of them (one transaction per group: ``enqueue_many`` for the
members, then ``enqueue`` for the join), so ``groups * width`` tasks and
``groups * (width - 1)`` dependency edges. The joins wait (status ``waiting``),
and each is released by the terminal write of its group's last member. Timed as
the plain drain is (:meth:`~ledgerq.bench.phases.Bench.drain`: the relay starts
once the whole backlog is committed; first start to last end), and compared with
the plain no-op drain of the same sitting: the extra cost per edge is the
difference of the two drains' time per task, spread over the edges.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from ledgerq.bench.phases import Bench
from ledgerq.ledger.producer import TaskSpec, enqueue, enqueue_many

KIND = "demo.noop"


def enqueue_graph(bench: Bench, groups: int, width: int) -> None:
    for group in range(groups):
        with Session(bench.engine) as session, session.begin():
            members = enqueue_many(
                session, [TaskSpec(KIND, {"group": group, "i": i}) for i in range(width - 1)]
            )
            enqueue(session, KIND, {"group": group, "join": True}, after=members)


def graph_drain(bench: Bench, groups: int, width: int, progress: Any) -> float:
    """Tasks/s of one graph drain of ``groups * width`` tasks."""
    bench.reset()
    enqueue_graph(bench, groups, width)
    total = groups * width
    bench.start_relay()
    bench.wait_finished(total, progress, timeout=max(120.0, total / 50))
    bench.stop_relay()
    count, span = bench.run(bench.ledger.drain_span())
    return float(count) / span if span else 0.0


def add_graph(
    bench: Bench, result: dict[str, Any], tasks: int, groups: int, phase: Any, repeat: int
) -> None:
    """``bench --graph GROUPS``: the graph drain of ``tasks`` tasks in ``groups``
    groups, ``repeat`` times (the median), next to the no-op drain of the same run;
    nothing with ``groups`` 0."""
    if not groups:
        return
    width = tasks // groups
    if width < 2:
        raise ValueError(f"--graph {groups} needs --tasks of at least {2 * groups}")
    runs = [
        graph_drain(bench, groups, width, phase(f"drain, graph ({i + 1}/{repeat})", 1))
        for i in range(repeat)
    ]
    rate = sorted(runs)[len(runs) // 2]
    edges = groups * (width - 1)
    result["graph"] = {"groups": groups, "width": width, "tasks": groups * width, "edges": edges}
    result["drain_graph_per_s"] = round(rate)
    result["drain_graph_runs"] = [round(r) for r in runs]
    plain = result.get("drain_per_s") or 0
    if plain and rate:
        total = groups * width
        extra_s = total / rate - total / plain
        result["graph_ratio"] = round(rate / plain, 3)
        result["graph_extra_us_per_edge"] = round(extra_s / edges * 1e6, 1)
