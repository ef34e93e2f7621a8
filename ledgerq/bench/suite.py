"""The benchmark's plan: which phases run, in what order, and what each reports.

It runs in a database of its own (the configured one with ``_bench`` appended)
and under the AMQP prefix ``<prefix>-bench``, because it empties the ledger.
Relay and workers are the real ``ledgerq relay`` / ``ledgerq worker`` processes.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from sqlalchemy.engine import make_url

from ledgerq.bench.phases import Bench, percentiles
from ledgerq.bench.raw import raw_ceiling
from ledgerq.ledger.config import Settings

KEYS = (
    "enqueue_per_s",
    "enqueue_batch_per_s",
    "drain_per_s",
    "drain_db_per_s",
    "latency_ms",
    "worker_rss_mb",
    "raw_publish_per_s",
    "raw_consume_per_s",
)


def bench_settings(settings: Settings) -> Settings:
    url = make_url(settings.database_url)
    name = f"{url.database or 'ledgerq'}_bench"
    return replace(
        settings,
        database_url=url.set(database=name).render_as_string(False),
        amqp_prefix=f"{settings.amqp_prefix}-bench",
    )


def run_suite(
    bench: Bench,
    result: dict[str, Any],
    tasks: int,
    handler: str,
    idle_rate: float,
    load_rate: float,
    history_rows: int,
    phase: Any,
    repeat: int = 1,
    ordering_keys: int = 0,
) -> None:
    progress = phase("raw aio-pika ceiling", 1)
    publish, consume = bench.run(raw_ceiling(bench.settings.amqp_url, tasks))
    result["raw_publish_per_s"], result["raw_consume_per_s"] = round(publish), round(consume)
    progress(1, 1)
    bench.reset()
    result["enqueue_per_s"] = round(
        bench.enqueue_single(min(tasks, 2000), phase("enqueue, 1 per transaction", 1))
    )
    bench.reset()
    result["enqueue_batch_per_s"] = round(
        bench.enqueue_batch(tasks, "demo.noop", phase("enqueue, batched", 1))
    )
    bench.start_workers()
    result["drain_per_s"] = result["drain_db_per_s"] = 0
    if handler in ("both", "noop"):
        runs = _drains(bench, tasks, "demo.noop", "drain, no-op", phase, repeat)
        result["drain_per_s"], result["drain_runs"] = _median(runs), [round(r) for r in runs]
        if ordering_keys:
            _ordered_drain(bench, result, tasks, phase, repeat, ordering_keys)
    if handler in ("both", "db"):
        label = "drain, one-row DB handler"
        runs = _drains(bench, tasks, "demo.receipt", label, phase, repeat)
        result["drain_db_per_s"], result["drain_db_runs"] = _median(runs), [round(r) for r in runs]
    probes = max(10, min(int(idle_rate * 10), tasks // 2))
    idle = bench.latency(idle_rate, probes / idle_rate, 1, phase("latency, idle", 1))
    load_seconds = max(2.0, min(5.0, tasks / load_rate))
    load = bench.latency(load_rate, load_seconds, 10, phase("latency, under load", 1))
    result["latency_ms"] = percentiles([s.to_start_ms for s in idle])
    result["latency_ms_terminal"] = percentiles([s.to_finish_ms for s in idle])
    result["latency_ms_load"] = percentiles([s.to_start_ms for s in load])
    result["latency_ms_load_terminal"] = percentiles([s.to_finish_ms for s in load])
    result["_idle"], result["_load"] = idle, load
    if history_rows:
        bench.reset()
        bench.fill_history(history_rows)
        label = "drain, full history"
        runs = _drains(bench, tasks, "demo.noop", label, phase, repeat, keep_filler=True)
        with_history = _median(runs)
        result["drain_history_runs"] = [round(r) for r in runs]
        result["drain_per_s_with_history"] = round(with_history)
        result["history_ratio"] = (
            round(with_history / result["drain_per_s"], 3) if result["drain_per_s"] else None
        )
    result["worker_rss_mb"] = bench.worker_peak_rss_mb()
    if result["raw_publish_per_s"]:
        result["drain_vs_raw_publish"] = round(result["drain_per_s"] / publish, 3)


def _ordered_drain(
    bench: Bench, result: dict[str, Any], tasks: int, phase: Any, repeat: int, keys: int
) -> None:
    """The no-op drain again with the tasks spread over ``keys`` ordering keys (each
    key's tasks one at a time), next to the unordered one of the same sitting."""
    runs = _drains(
        bench, tasks, "demo.noop", f"drain, {keys} ordering keys", phase, repeat, keys=keys
    )
    result["drain_ordered_per_s"], result["drain_ordered_runs"] = (
        _median(runs),
        [round(r) for r in runs],
    )
    unordered = result["drain_per_s"]
    result["ordered_ratio"] = (
        round(result["drain_ordered_per_s"] / unordered, 3) if unordered else None
    )


def _drains(
    bench: Bench, tasks: int, kind: str, label: str, phase: Any, repeat: int, **options: Any
) -> list[float]:
    """``repeat`` drains of ``tasks`` tasks of ``kind``, each with its progress bar."""
    return [
        bench.drain(tasks, kind, phase(f"{label} ({i + 1}/{repeat})", 1), **options)
        for i in range(repeat)
    ]


def _median(values: list[float]) -> int:
    return round(statistics.median(values))
