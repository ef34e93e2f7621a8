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

from ledgerq.bench.graph import add_graph
from ledgerq.bench.phases import Bench, LatencySample, percentiles
from ledgerq.bench.raw import pipeline_ceiling, raw_ceiling, release_ceiling
from ledgerq.core.config import Settings
from ledgerq.ledger.split.ledger import ShardedLedger

#: The drains ``--handler`` can pick: name -> (kind, result key, phase label).
DRAINS = {
    "sync-db": ("demo.write", "drain_sync_db_per_s", "drain, sync handler, one row"),
    "async-db": ("demo.awrite", "drain_async_db_per_s", "drain, async handler, one row"),
    "noop": ("demo.noop", "drain_per_s", "drain, no-op"),
    "group": ("demo.receipt", "drain_db_per_s", "drain, one row, group_commit=True"),
    # Threads vs ``worker --processes N`` (issue 26): holds the GIL for its whole run.
    "cpu": ("demo.cpu", "drain_cpu_per_s", "drain, sync CPU-bound handler"),
}
#: What each ``--handler`` choice runs, in the order the drains run.
HANDLER_CHOICES = {
    "all": ("sync-db", "async-db", "noop", "group"),
    "both": ("noop", "group"),  # before issue 13: the no-op and the group-commit drain
    "db": ("group",),
    **{name: (name,) for name in DRAINS},
}

KEYS = (
    "drain_sync_db_per_s",
    "drain_async_db_per_s",
    "drain_sync_db_cpu_ms_per_task",
    "drain_async_db_cpu_ms_per_task",
    "pipeline_ceiling_per_s",
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
    latency: bool = True,
    vs_direct: bool = True,
    graph_groups: int = 0,
) -> None:
    progress = phase("raw aio-pika ceiling", 1)
    publish, consume = bench.run(raw_ceiling(bench.settings.amqp_url, tasks))
    result["raw_publish_per_s"], result["raw_consume_per_s"] = round(publish), round(consume)
    progress(1, 1)
    progress = phase("pipeline ceiling (publish, consume, ack, ledger writes)", 1)
    bench.reset()
    bench.enqueue_batch(tasks, "demo.noop", lambda d, t: None)
    assert not isinstance(bench.ledger, ShardedLedger), "with ledger shards: run_sharded_suite"
    try:
        ceiling = pipeline_ceiling(bench.settings, tasks)
    finally:
        bench.run(release_ceiling(bench.settings))
    result["pipeline_ceiling_per_s"] = round(ceiling)
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
    for key in ("drain_per_s", "drain_db_per_s", "drain_sync_db_per_s", "drain_async_db_per_s"):
        result[key] = 0
    for name in HANDLER_CHOICES[handler]:
        kind, key, label = DRAINS[name]
        runs, cpu, occupancy, envelope = [], [], [], []
        for i in range(repeat):
            runs.append(bench.drain(tasks, kind, phase(f"{label} ({i + 1}/{repeat})", 1)))
            cpu.append(bench.last_cpu_ms_per_task)
            occupancy.extend(bench.last_occupancy)
            envelope.append(bench.last_envelope)
        result[key] = _median(runs)
        result[key.replace("_per_s", "_runs")] = [round(r) for r in runs]
        result[key.replace("_per_s", "_cpu_ms_per_task")] = round(statistics.median(cpu), 3)
        # The broker window while it drained (published / capacity, sampled every
        # quarter second) and the tasks each message carried (envelopes).
        result[key.replace("_per_s", "_window")] = {
            "mean": round(statistics.fmean(occupancy), 3) if occupancy else 0.0,
            "max": round(max(occupancy), 3) if occupancy else 0.0,
        }
        result[key.replace("_per_s", "_envelope")] = round(statistics.median(envelope), 2)
    if ordering_keys and "noop" in HANDLER_CHOICES[handler]:
        _ordered_drain(bench, result, tasks, phase, repeat, ordering_keys)
    # With the broker path's workers still up, beside the no-op drain (0: nothing); the
    # direct path's drain below stops them.
    add_graph(bench, result, tasks, graph_groups, phase, repeat)
    if ceiling:
        result["drain_vs_pipeline_ceiling"] = round(result["drain_per_s"] / ceiling, 3)
    if not latency:
        result["worker_rss_mb"] = bench.worker_peak_rss_mb()
        _same_run_direct(bench, result, tasks, handler, phase, repeat, vs_direct)
        return
    idle = idle_latency(bench, tasks, idle_rate, phase("latency, idle", 1))
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
    _same_run_direct(bench, result, tasks, handler, phase, repeat, vs_direct)


def _same_run_direct(
    bench: Bench,
    result: dict[str, Any],
    tasks: int,
    handler: str,
    phase: Any,
    repeat: int,
    wanted: bool,
) -> None:
    """The direct path's no-op drain after the broker path's, in the same run (its
    workers stopped first), and the broker path's ratio to it: the two paths on
    one machine within a minute of each other, so the ratio survives a noisy host
    where two runs' absolute figures do not."""
    if not wanted or "noop" not in HANDLER_CHOICES[handler]:
        return
    broker_rss = result["worker_rss_mb"]
    bench.services.stop()
    direct = replace(bench, direct=True)
    try:
        run_direct(direct, result, tasks, phase, repeat)
    finally:
        direct.services.stop()
    result["worker_rss_mb"] = max(broker_rss, result["worker_rss_mb"])
    if result["direct_drain_per_s"]:
        result["drain_vs_direct"] = round(result["drain_per_s"] / result["direct_drain_per_s"], 3)


def sharded_settings(settings: Settings, count: int) -> Settings:
    """The benchmark's settings over ``count`` ledger shards: its database's name
    plus ``_shard0``, ``_shard1``, ... (the unsplit benchmark's database is not one)."""
    url = make_url(bench_settings(settings).database_url)
    urls = [
        url.set(database=f"{url.database}_shard{k}").render_as_string(False) for k in range(count)
    ]
    return replace(bench_settings(settings), database_url=",".join(urls))


def run_sharded_suite(
    bench: Bench, result: dict[str, Any], tasks: int, phase: Any, repeat: int
) -> None:
    """``--ledger-shards N``: the batched enqueue and the no-op drain on a ledger split
    across N databases (chunks of the backlog enqueued on the shards in turn; the
    relay processes serve every shard, one loop each; workers claim on each id's
    shard). Compare with the unsplit bench's same keys, in the same sitting."""
    bench.reset()
    result["enqueue_batch_per_s"] = round(
        bench.enqueue_batch(tasks, "demo.noop", phase("enqueue, batched, over the shards", 1))
    )
    bench.start_workers()
    runs, cpu = [], []
    for i in range(repeat):
        runs.append(bench.drain(tasks, "demo.noop", phase(f"drain, no-op ({i + 1}/{repeat})", 1)))
        cpu.append(bench.last_cpu_ms_per_task)
    result["drain_per_s"], result["drain_runs"] = _median(runs), [round(r) for r in runs]
    result["drain_cpu_ms_per_task"] = round(statistics.median(cpu), 3)
    result["worker_rss_mb"] = bench.worker_peak_rss_mb()


def run_direct(
    bench: Bench, result: dict[str, Any], tasks: int, phase: Any, repeat: int = 1
) -> None:
    """``bench --direct``: the no-op drain by ``worker --direct`` processes, no broker
    and no relay (the backlog is committed before the workers start claiming:
    each drain enqueues first, then starts the workers, as pgqueuer's peer does)."""
    runs, cpu = [], []
    for i in range(repeat):
        runs.append(
            bench.drain(tasks, "demo.noop", phase(f"drain, no-op, direct ({i + 1}/{repeat})", 1))
        )
        cpu.append(bench.last_cpu_ms_per_task)
    result["direct_drain_per_s"] = _median(runs)
    result["direct_drain_runs"] = [round(r) for r in runs]
    result["direct_drain_cpu_ms_per_task"] = round(statistics.median(cpu), 3)
    result["worker_rss_mb"] = bench.direct_rss_mb


def idle_latency(bench: Bench, tasks: int, rate: float, progress: Any) -> list[LatencySample]:
    """Tasks committed one per transaction at ``rate`` a second for ten seconds (at
    least 10 tasks, at most half the backlog), each timed from its commit."""
    probes = max(10, min(int(rate * 10), tasks // 2))
    return bench.latency(rate, probes / rate, 1, progress)


def direct_latency(
    bench: Bench, result: dict[str, Any], tasks: int, rate: float, phase: Any
) -> None:
    """``bench --direct``: the idle latency of the direct path, ``rate`` tasks/s, one per
    transaction, as the broker path's idle phase measures it (commit to handler
    start and to terminal status): NOTIFY wakes the workers on PostgreSQL, their
    poll on MySQL / MariaDB."""
    idle = idle_latency(bench, tasks, rate, phase("latency, idle, direct", 1))
    result["direct_latency_ms"] = percentiles([s.to_start_ms for s in idle])
    result["direct_latency_ms_terminal"] = percentiles([s.to_finish_ms for s in idle])


def add_pgqueuer(result: dict[str, Any], runs: list[float]) -> None:
    """pgqueuer's drains' median, and the direct drain's ratio to it."""
    peer = _median(runs)
    result["pgqueuer_per_s"], result["pgqueuer_runs"] = peer, [round(r) for r in runs]
    if peer and result.get("direct_drain_per_s"):
        result["direct_vs_pgqueuer"] = round(result["direct_drain_per_s"] / peer, 2)


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


def add_peer(result: dict[str, Any], runs: list[float]) -> None:
    """The Celery drains' median, and each default-path drain's ratio to it."""
    celery = _median(runs)
    result["celery_db_per_s"], result["celery_db_runs"] = celery, [round(r) for r in runs]
    for key in ("drain_sync_db_per_s", "drain_async_db_per_s", "drain_db_per_s"):
        if result.get(key) and celery:
            result[key.replace("_per_s", "_vs_celery")] = round(result[key] / celery, 2)
