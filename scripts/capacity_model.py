"""How many of each part 100,000 tasks/s needs, sized from measured costs and
checked by a discrete-event simulation (docs/scaling.md).

Usage: python scripts/capacity_model.py [--rate 100000] [--costs docs/capacity/costs.json]
                                         [--seconds 3] [--seed 1]

1. **Sizing.** Each part's CPU per task comes from scripts/measure_costs.py (run on
   this machine). A relay or a worker is one Python process, so it uses at most one
   core; a ledger shard is one PostgreSQL server of ``--pg-cores`` cores; a
   RabbitMQ node has ``--mq-cores`` cores, and a quorum queue costs its broker
   ``--quorum-factor`` times a classic queue's CPU (the replication; an
   assumption, see the docs). A shard also writes at most ``--wal-mb-s`` MB of
   WAL a second, and one broker queue (one Erlang process) carries at most
   ``--queue-rate`` messages a second. Every part is sized so it is busy at most
   ``--utilization`` of the time, the headroom a stall, a retry storm or a
   failover eats.
2. **Simulation (SimPy).** The shards share nothing, so one shard is simulated at
   its share of the rate: tasks arrive as a Poisson stream and are committed by
   the shard's PostgreSQL; relays poll every ``--poll`` seconds and publish what
   is due in batches of up to 500 (their CPU, PostgreSQL's for marking them, the
   broker's, spread over its cores in pieces of 50 messages); each message goes
   to a free worker slot, whose process spends its CPU and PostgreSQL's on claim
   and finish. Every core is a SimPy resource, so
   the model queues where the real system would. It prints the throughput it
   sustained, each part's utilisation and the commit-to-end latency.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import simpy

ROOT = Path(__file__).resolve().parents[1]
RELAY_BATCH = 500
#: Messages of a relay batch the broker handles as one piece of work on one core.
CONFIRM_CHUNK = 50


@dataclass(frozen=True)
class Costs:
    """CPU milliseconds per task, and WAL bytes per task, as measured."""

    producer_pg: float
    relay: float
    relay_pg: float
    worker: float
    worker_pg: float
    pg_rest: float
    broker: float
    wal_bytes: float

    @classmethod
    def load(cls, path: Path) -> Costs:
        data = json.loads(path.read_text())
        enqueue, drain = data["enqueue"], data["drain"]
        return cls(
            producer_pg=enqueue["pg_producer_cpu_ms"],
            relay=drain["relay_cpu_ms"],
            relay_pg=drain["pg_relay_cpu_ms"],
            worker=drain["worker_cpu_ms"],
            worker_pg=drain["pg_worker_cpu_ms"],
            pg_rest=enqueue["pg_rest_cpu_ms"] + drain["pg_rest_cpu_ms"],
            broker=drain["broker_cpu_ms"],
            wal_bytes=enqueue["wal_bytes"] + drain["wal_bytes"],
        )

    @property
    def pg(self) -> float:
        return self.producer_pg + self.relay_pg + self.worker_pg + self.pg_rest


@dataclass(frozen=True)
class Plan:
    rate: float
    shards: int
    relays_per_shard: int
    workers: int
    mq_nodes: int
    broker_queues: int
    pg_cores: int
    mq_cores: int
    wal_mb_s_per_shard: float

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def size(costs: Costs, args: argparse.Namespace) -> Plan:
    u, rate = args.utilization, args.rate

    def cores(ms: float) -> float:
        return rate * ms / 1000

    wal_mb_s = rate * costs.wal_bytes / 1e6
    shards = max(
        math.ceil(cores(costs.pg) / (args.pg_cores * u)),  # PostgreSQL's CPU
        math.ceil(wal_mb_s / (args.wal_mb_s * u)),  # the WAL one server writes
        1,
    )
    relays = math.ceil(cores(costs.relay) / u / shards)
    workers = math.ceil(cores(costs.worker) / u)
    workers += -workers % shards  # the same number on every shard
    mq = math.ceil(cores(costs.broker * args.quorum_factor) / (args.mq_cores * u))
    mq = max(3, mq + (mq % 2 == 0))  # an odd number, three at least, for quorum queues
    queues = shards * math.ceil(rate / shards / (args.queue_rate * u))
    return Plan(
        rate, shards, relays, workers, mq, queues, args.pg_cores, args.mq_cores,
        round(wal_mb_s / shards, 1),
    )  # fmt: skip


class Shard:
    """One ledger shard and its share of relays, workers and broker capacity."""

    def __init__(self, env: simpy.Environment, costs: Costs, plan: Plan, args: argparse.Namespace):
        self.env, self.costs, self.args = env, costs, args
        # Its own generator: another thread of the process drawing from the global
        # one (a back-off's jitter) must not change the simulation.
        self.random = random.Random(args.seed)
        self.pg = simpy.Resource(env, capacity=plan.pg_cores)
        self.mq = simpy.Resource(env, capacity=max(1, plan.mq_nodes * plan.mq_cores // plan.shards))
        self.workers = simpy.Resource(env, capacity=plan.workers // plan.shards)
        self.relays = [simpy.Resource(env, capacity=1) for _ in range(plan.relays_per_shard)]
        self.slots = simpy.Resource(env, capacity=plan.workers // plan.shards * args.concurrency)
        self.due: list[float] = []
        self.arrived = 0
        self.latencies: list[float] = []
        self.busy = {"pg": 0.0, "mq": 0.0, "relay": 0.0, "worker": 0.0}

    def cpu(self, resource: simpy.Resource, part: str, ms: float) -> Any:
        with resource.request() as turn:
            yield turn
            yield self.env.timeout(ms / 1000)
            self.busy[part] += ms / 1000

    def producers(self, rate: float) -> Any:
        while True:
            yield self.env.timeout(self.random.expovariate(rate))
            self.arrived += 1
            self.env.process(self.commit(self.env.now))

    def commit(self, at: float) -> Any:
        yield from self.cpu(self.pg, "pg", self.costs.producer_pg + self.costs.pg_rest)
        self.due.append(at)

    def relay(self, index: int) -> Any:
        resource = self.relays[index]
        while True:
            batch, self.due = self.due[:RELAY_BATCH], self.due[RELAY_BATCH:]
            if not batch:
                yield self.env.timeout(self.args.poll)
                continue
            n = len(batch)
            yield from self.cpu(self.pg, "pg", n * self.costs.relay_pg)
            yield from self.cpu(resource, "relay", n * self.costs.relay)
            # The broker spreads a batch over its cores (channel and queue processes);
            # the relay waits for every confirm.
            per_message = self.costs.broker * self.args.quorum_factor
            yield self.env.all_of(
                [
                    self.env.process(self.cpu(self.mq, "mq", len(part) * per_message))
                    for part in (batch[i : i + CONFIRM_CHUNK] for i in range(0, n, CONFIRM_CHUNK))
                ]
            )
            for committed in batch:
                self.env.process(self.run(committed))

    def run(self, committed: float) -> Any:
        with self.slots.request() as slot:
            yield slot
            yield from self.cpu(self.workers, "worker", self.costs.worker)
            yield from self.cpu(self.pg, "pg", self.costs.worker_pg)
        self.latencies.append(self.env.now - committed)


def simulate(costs: Costs, plan: Plan, args: argparse.Namespace) -> dict[str, Any]:
    env = simpy.Environment()
    shard = Shard(env, costs, plan, args)
    env.process(shard.producers(plan.rate / plan.shards))
    for index in range(plan.relays_per_shard):
        env.process(shard.relay(index))
    warmup = 1.0
    env.run(until=warmup)
    done_before, busy_before = len(shard.latencies), dict(shard.busy)
    arrived_before = shard.arrived
    env.run(until=warmup + args.seconds)
    measured = shard.latencies[done_before:]
    capacity = {
        "pg": plan.pg_cores,
        "mq": shard.mq.capacity,
        "relay": plan.relays_per_shard,
        "worker": shard.workers.capacity,
    }
    quantiles = statistics.quantiles(measured, n=100)
    return {
        "offered_tasks_per_s": round((shard.arrived - arrived_before) / args.seconds * plan.shards),
        "sustained_tasks_per_s": round(len(measured) / args.seconds * plan.shards),
        "utilization": {
            part: round((shard.busy[part] - busy_before[part]) / args.seconds / capacity[part], 2)
            for part in capacity
        },
        "latency_ms": {
            "p50": round(quantiles[49] * 1000, 1),
            "p99": round(quantiles[98] * 1000, 1),
        },
        "backlog_at_end": len(shard.due),
    }


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=100_000)
    parser.add_argument("--costs", type=Path, default=ROOT / "docs" / "capacity" / "costs.json")
    parser.add_argument("--pg-cores", type=int, default=16)
    parser.add_argument("--mq-cores", type=int, default=8)
    parser.add_argument("--quorum-factor", type=float, default=2.5)
    parser.add_argument("--wal-mb-s", type=float, default=100.0)
    parser.add_argument("--queue-rate", type=float, default=20_000)
    parser.add_argument("--utilization", type=float, default=0.6)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--poll", type=float, default=0.01)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--seed", type=int, default=1)
    return parser


def model(argv: list[str] | None = None) -> dict[str, Any]:
    """The plan for ``--rate`` and what the simulation of it sustained."""
    args = parser().parse_args(argv)
    costs = Costs.load(args.costs)
    plan = size(costs, args)
    return {"plan": plan.as_dict(), "simulated": simulate(costs, plan, args)}


def main() -> None:
    print(json.dumps(model(), indent=2))


if __name__ == "__main__":
    main()
