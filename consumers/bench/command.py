"""``ledgerq bench``: measure the pipeline on this machine against its raw ceiling.

It runs in a database of its own (the configured one with ``_bench`` appended)
and under the AMQP prefix ``<prefix>-bench``, because it truncates its tables.
Relay and workers are the real ``ledgerq relay`` / ``ledgerq worker`` processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.engine import make_url

from consumers.bench.phases import Bench, percentiles
from consumers.bench.raw import raw_ceiling
from consumers.bench.report import plot, render
from consumers.sql import Q
from consumers.worker import WorkerConfig
from ledger.cli import cli, pass_settings
from ledger.config import Settings
from ledger.db import sync_engine
from ledger.migrate import upgrade

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


@cli.command("bench")
@click.option("--tasks", default=20_000, show_default=True, help="Backlog size for each drain.")
@click.option("--workers", default=1, show_default=True, help="Worker processes.")
@click.option(
    "--concurrency",
    default=WorkerConfig.concurrency,
    show_default=True,
    help="Per worker process (the worker's own default).",
)
@click.option(
    "--handler",
    type=click.Choice(["both", "noop", "db"]),
    default="both",
    show_default=True,
    help="Which drains to run.",
)
@click.option(
    "--idle-rate",
    default=20.0,
    show_default=True,
    help="Tasks/s for the idle latency phase (one per transaction).",
)
@click.option(
    "--load-rate", default=1000.0, show_default=True, help="Tasks/s for the loaded latency phase."
)
@click.option(
    "--history-rows",
    default=0,
    show_default=True,
    help="Also drain again with this many finished rows in history.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Write a PNG of latency over time.",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    help="Run each drain this many times and report the median.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_settings
def bench_command(
    settings: Settings,
    tasks: int,
    workers: int,
    concurrency: int,
    handler: str,
    idle_rate: float,
    load_rate: float,
    history_rows: int,
    plot_path: str | None,
    as_json: bool,
    repeat: int,
) -> None:
    """Throughput and latency of the whole pipeline, next to a raw aio-pika ceiling."""
    if tasks < 10 or workers < 1 or concurrency < 1 or repeat < 1:
        raise click.BadParameter("--tasks >= 10, --workers, --concurrency and --repeat >= 1")
    settings = bench_settings(settings)
    upgrade(settings)
    engine = sync_engine(settings, "ledgerq-bench", pool_size=2)
    with engine.begin() as conn:
        conn.execute(Q.create_orders)
        conn.execute(Q.create_receipts)
    console = Console(stderr=True)
    bench = Bench(settings, engine, Path("bench-logs"), workers, concurrency)
    result: dict[str, Any] = {
        "config": {
            "tasks": tasks,
            "workers": workers,
            "concurrency": concurrency,
            "handler": handler,
            "idle_rate": idle_rate,
            "load_rate": load_rate,
            "history_rows": history_rows,
            "repeat": repeat,
            "cpus": _cpus(),
            "python": platform.python_version(),
        }
    }
    with Progress(
        TextColumn("{task.description:<34}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=as_json,
    ) as progress:

        def phase(name: str, total: int) -> Any:
            bar = progress.add_task(name, total=total)
            return lambda done, of: progress.update(bar, completed=done, total=of)

        try:
            _run(bench, result, tasks, handler, idle_rate, load_rate, history_rows, phase, repeat)
        finally:
            bench.services.stop()
            engine.dispose()
    if plot_path:
        plot(result.pop("_idle"), result.pop("_load"), Path(plot_path))
        result["plot"] = plot_path
    result.pop("_idle", None)
    result.pop("_load", None)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        render(result, Console())


def _run(
    bench: Bench,
    result: dict[str, Any],
    tasks: int,
    handler: str,
    idle_rate: float,
    load_rate: float,
    history_rows: int,
    phase: Any,
    repeat: int = 1,
) -> None:
    progress = phase("raw aio-pika ceiling", 1)
    publish, consume = asyncio.run(raw_ceiling(bench.settings.amqp_url, tasks))
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
        runs = [
            bench.drain(tasks, "demo.noop", phase(f"drain, no-op ({i + 1}/{repeat})", 1))
            for i in range(repeat)
        ]
        result["drain_per_s"], result["drain_runs"] = _median(runs), [round(r) for r in runs]
    if handler in ("both", "db"):
        runs = [
            bench.drain(
                tasks, "demo.receipt", phase(f"drain, one-row DB handler ({i + 1}/{repeat})", 1)
            )
            for i in range(repeat)
        ]
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
        runs = [
            bench.drain(
                tasks,
                "demo.noop",
                phase(f"drain, full history ({i + 1}/{repeat})", 1),
                keep_filler=True,
            )
            for i in range(repeat)
        ]
        with_history = _median(runs)
        result["drain_history_runs"] = [round(r) for r in runs]
        result["drain_per_s_with_history"] = round(with_history)
        result["history_ratio"] = (
            round(with_history / result["drain_per_s"], 3) if result["drain_per_s"] else None
        )
    result["worker_rss_mb"] = bench.worker_peak_rss_mb()
    if result["raw_publish_per_s"]:
        result["drain_vs_raw_publish"] = round(result["drain_per_s"] / publish, 3)


def _median(values: list[float]) -> int:
    return round(statistics.median(values))


def _cpus() -> int:
    return os.cpu_count() or 0
