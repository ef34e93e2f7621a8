"""The capacity model (scripts/capacity_model.py) and docs/scaling.md, which quotes it.

The model sizes each part from the measured per-task costs in
docs/capacity/costs.json and checks the plan with a SimPy simulation. These tests
run it: the plan it makes for the documented rate is sustained, a plan with too
few workers is not (so the simulation can fail), and the docs quote the figures
the committed costs give.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def capacity() -> ModuleType:
    path = ROOT / "scripts" / "capacity_model.py"
    spec = importlib.util.spec_from_file_location("capacity_model", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def headline(capacity: ModuleType) -> dict[str, Any]:
    result: dict[str, Any] = capacity.model([])  # the command the docs run, as they run it
    return result


def test_the_plan_for_100k_per_second_is_sustained_within_its_headroom(
    headline: dict[str, Any],
) -> None:
    plan, simulated = headline["plan"], headline["simulated"]
    assert plan["rate"] == 100_000
    assert simulated["sustained_tasks_per_s"] >= 0.97 * simulated["offered_tasks_per_s"]
    assert simulated["backlog_at_end"] < 0.01 * plan["rate"] / plan["shards"]
    assert all(u <= 0.7 for u in simulated["utilization"].values()), simulated


def test_too_few_workers_fall_behind(capacity: ModuleType) -> None:
    args = capacity.parser().parse_args(["--rate", "20000", "--seconds", "1"])
    costs = capacity.Costs.load(args.costs)
    plan = capacity.size(costs, args)
    starved = capacity.Plan(**{**plan.as_dict(), "workers": plan.shards})  # one per shard
    simulated = capacity.simulate(costs, starved, args)
    assert simulated["sustained_tasks_per_s"] < 0.7 * simulated["offered_tasks_per_s"]
    assert simulated["utilization"]["worker"] >= 0.99


def test_scaling_md_quotes_the_model_as_it_runs_now(headline: dict[str, Any]) -> None:
    text = (ROOT / "docs" / "scaling.md").read_text()
    plan, simulated = headline["plan"], headline["simulated"]
    quoted = {
        "shards": plan["shards"],
        "relays per shard": plan["relays_per_shard"],
        "worker processes": plan["workers"],
        "RabbitMQ nodes": plan["mq_nodes"],
        "broker queues": plan["broker_queues"],
    }
    for name, value in quoted.items():
        assert re.search(rf"\| {name} \| {value} \|", text), f"docs/scaling.md: {name} {value}"
    assert f"{simulated['sustained_tasks_per_s']:,}" in text
    assert f"p99 {simulated['latency_ms']['p99']} ms" in text
