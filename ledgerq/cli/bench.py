"""``ledgerq bench``: measure the pipeline on this machine against its raw ceiling."""

from __future__ import annotations

import asyncio
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from rich.console import Console
from sqlalchemy import Engine

from ledgerq.bench.peer import CeleryPeer, PgqueuerPeer, pgqueuer_installed, require_celery
from ledgerq.bench.phases import Bench
from ledgerq.bench.report import plot, render, require_plotting
from ledgerq.bench.results import check_waiters
from ledgerq.bench.results import measure as measure_results
from ledgerq.bench.suite import (
    HANDLER_CHOICES,
    add_peer,
    add_pgqueuer,
    bench_settings,
    direct_latency,
    run_direct,
    run_sharded_suite,
    run_suite,
    sharded_settings,
)
from ledgerq.cli.group import pass_settings, progress_bar
from ledgerq.compose.storage import async_engine, own_ledger_on, sync_engine, upgrade
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.demo import prepare_shop
from ledgerq.ledger.split.ids import MAX_LEDGER_SHARDS
from ledgerq.ledger.split.ledger import ShardedLedger

if TYPE_CHECKING:
    from ledgerq.bench.phases import BenchLedger

#: Why the peers are not run on a MySQL / MariaDB ledger (their one-line note).
PEER_ON_MYSQL = "not run: it keeps its jobs in PostgreSQL, and this ledger is on MySQL / MariaDB"


@click.command("bench")
@click.option("--tasks", default=20_000, show_default=True, help="Backlog size for each drain.")
@click.option("--workers", default=1, show_default=True, help="Worker processes.")
@click.option("--relays", default=1, show_default=True, help="Relay processes.")
@click.option(
    "--concurrency",
    default=WorkerConfig.concurrency,
    show_default=True,
    help="Per worker process (the worker's own default).",
)
@click.option(
    "--handler",
    type=click.Choice(list(HANDLER_CHOICES)),
    default="all",
    show_default=True,
    help="Which drains to run: sync-db / async-db (one row through ctx.session, no "
    "option), noop, group (one row, group_commit=True), cpu (a sync CPU-bound handler, "
    "about 10 ms of pure Python; not in all); all: every one; both: noop and group; "
    "db: group.",
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
    help="Write a PNG of latency over time (needs the bench extra: ledgerq[bench]).",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    help="Run each drain this many times and report the median.",
)
@click.option(
    "--metrics-port",
    default=0,
    show_default=True,
    help="Serve metrics from the relay on this port and worker i on port + 1 + i "
    "(to measure their cost; 0: none).",
)
@click.option(
    "--ordering-keys",
    default=0,
    show_default=True,
    help="Also drain the no-op backlog spread over this many ordering keys (0: skip).",
)
@click.option(
    "--latency/--no-latency",
    default=True,
    show_default=True,
    help="Run the latency phases (--no-latency: throughput only, for quick comparisons).",
)
@click.option(
    "--vs-direct/--no-vs-direct",
    default=True,
    show_default=True,
    help="After the broker path's drains, drain the no-op backlog again through the "
    "ledger-direct path (`worker --direct`) in the same run, and print the ratio.",
)
@click.option(
    "--peer",
    type=click.Choice(["none", "celery"]),
    default="none",
    show_default=True,
    help="Also drain the same one-row work with Celery (RabbitMQ, acks_late, prefork x2) "
    "in this run, and print ledgerq's ratio to it (needs Celery: the dev extra).",
)
@click.option(
    "--direct",
    is_flag=True,
    help="Measure the ledger-direct path instead (`ledgerq worker --direct`, no broker, "
    "no relay): the no-op drain, and pgqueuer's drain of as many no-op jobs in the same "
    "run when pgqueuer is installed (the dev extra), with the ratio.",
)
@click.option(
    "--worker-arg",
    "worker_args",
    multiple=True,
    help="An extra option for the workers (repeatable), e.g. --worker-arg=--no-batch-commit.",
)
@click.option(
    "--processes",
    type=click.IntRange(min=1),
    default=None,
    help="Run each worker as `ledgerq worker --processes N` (N processes of --concurrency "
    "slots each); compare with --handler cpu.",
)
@click.option(
    "--ledger-shards",
    type=click.IntRange(1, MAX_LEDGER_SHARDS),
    default=1,
    show_default=True,
    help="Split the benchmark's ledger across this many databases (ledger shards) and "
    "run only the batched enqueue and the no-op drain on it (1: the whole suite).",
)
@click.option(
    "--graph",
    "graph_groups",
    default=0,
    show_default=True,
    type=click.IntRange(min=0),
    help="Also drain a fan-out/fan-in graph of --tasks tasks: this many groups, each "
    "joined by one task enqueued after=[the group] (0: skip; 100 with --tasks 10000).",
)
@click.option(
    "--results",
    "results",
    type=click.IntRange(min=1, max=100_000),
    default=None,
    help="Measure only result(): this many waiters in one process, their tasks ended "
    "the worker's way a batch at a time; latency from each end's commit to its "
    "waiter's return (p50/p99). No relay, worker or broker. At most 100 on MySQL / "
    "MariaDB, where each waiter polls on a connection of its own.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@pass_settings
def bench(
    settings: Settings,
    tasks: int,
    workers: int,
    relays: int,
    concurrency: int,
    handler: str,
    idle_rate: float,
    load_rate: float,
    history_rows: int,
    plot_path: str | None,
    as_json: bool,
    repeat: int,
    metrics_port: int,
    ordering_keys: int,
    latency: bool,
    vs_direct: bool,
    worker_args: tuple[str, ...],
    peer: str,
    ledger_shards: int,
    direct: bool,
    processes: int | None,
    graph_groups: int,
    results: int | None,
) -> None:
    """Throughput and latency of the whole pipeline, next to a raw aio-pika ceiling."""
    if results is not None:
        _results(settings, results, as_json)
        return
    if processes is not None:
        worker_args = (*worker_args, "--processes", str(processes))
    _check(tasks, (workers, relays, concurrency, repeat), ordering_keys, direct, ledger_shards)
    _check_graph(graph_groups, tasks, direct, ledger_shards)
    _require(plot_path, "none" if settings.on_mysql else peer)
    settings, engines, ledger = _prepare(settings, ledger_shards)
    engine = engines[0]
    console = Console(stderr=True)
    loop = asyncio.Runner()
    bench = Bench(
        settings,
        engine,
        ledger,
        loop.run,
        Path("bench-logs"),
        workers,
        concurrency,
        metrics_port,
        worker_args,
        relays,
        shard_engines=engines if len(engines) > 1 else (),
        direct=direct,
    )
    result: dict[str, Any] = {
        "config": {
            "tasks": tasks,
            "workers": workers,
            "relays": relays,
            "concurrency": concurrency,
            "handler": handler,
            "idle_rate": idle_rate,
            "load_rate": load_rate,
            "history_rows": history_rows,
            "repeat": repeat,
            "metrics_port": metrics_port,
            "ordering_keys": ordering_keys,
            "worker_args": list(worker_args),
            "processes": processes,
            "peer": peer,
            "ledger_shards": ledger_shards,
            "direct": direct,
            "graph": graph_groups,
            "vs_direct": vs_direct,
            "cpus": _cpus(),
            "python": platform.python_version(),
        }
    }
    with progress_bar(console, width=34, transient=as_json) as progress:

        def phase(name: str, total: int) -> Any:
            bar = progress.add_task(name, total=total)
            return lambda done, of: progress.update(bar, completed=done, total=of)

        try:
            if ledger_shards > 1:
                run_sharded_suite(bench, result, tasks, phase, repeat)
                peer = "none"
            elif direct:
                _direct(bench, result, tasks, phase, repeat, idle_rate if latency else 0.0)
            else:
                run_suite(
                    bench,
                    result,
                    tasks,
                    handler,
                    idle_rate,
                    load_rate,
                    history_rows,
                    phase,
                    repeat,
                    ordering_keys,
                    latency,
                    vs_direct,
                    graph_groups,
                )
            if peer == "celery" and settings.on_mysql:
                _skip_peer(result, "celery", "the Celery peer", console)
            elif peer == "celery":
                celery = CeleryPeer(bench.settings, engine, bench.log_dir)
                runs = [
                    celery.drain(tasks, phase(f"drain, Celery peer ({i + 1}/{repeat})", 1))
                    for i in range(repeat)
                ]
                add_peer(result, runs)
        finally:
            bench.services.stop()
            loop.run(ledger.dispose())
            loop.close()
            for each in engines:
                each.dispose()
    if plot_path and not direct:
        plot(result.pop("_idle"), result.pop("_load"), Path(plot_path))
        result["plot"] = plot_path
    _render(result, as_json or ledger_shards > 1)  # sharded: the table is the whole suite's


def _require(plot_path: str | None, peer: str) -> None:
    """What the options need installed (exits 78 when it is not)."""
    if plot_path:
        require_plotting()
    if peer == "celery":
        require_celery()


def _skip_peer(result: dict[str, Any], key: str, peer: str, console: Console) -> None:
    """A peer not run on MySQL: the note in the result, and one line now."""
    result[key] = PEER_ON_MYSQL
    console.print(f"{peer}: {PEER_ON_MYSQL}")


def _check(
    tasks: int, counts: tuple[int, ...], ordering_keys: int, direct: bool, ledger_shards: int
) -> None:
    """One line for options that cannot make a benchmark."""
    if min(counts) < 1 or tasks < 10 or ordering_keys < 0:
        raise click.BadParameter(
            "--tasks >= 10, --workers, --relays, --concurrency and --repeat >= 1, "
            "--ordering-keys >= 0"
        )
    if direct and ledger_shards > 1:
        raise click.BadParameter(
            "--direct and --ledger-shards measure different things: one at a time"
        )


def _check_graph(groups: int, tasks: int, direct: bool, ledger_shards: int) -> None:
    if groups and (tasks // groups < 2 or direct or ledger_shards > 1):
        raise click.BadParameter(
            "--graph GROUPS needs --tasks >= 2 x GROUPS, on the broker path with one ledger"
        )


def _render(result: dict[str, Any], as_json: bool) -> None:
    result.pop("_idle", None)
    result.pop("_load", None)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        render(result, Console())


def _prepare(settings: Settings, ledger_shards: int) -> tuple[Settings, list[Engine], BenchLedger]:
    """The benchmark's own database(s), migrated, with the demo's tables; an engine
    per database and the ledger over them (on either server)."""
    if ledger_shards > 1:
        settings = sharded_settings(settings, ledger_shards)
    else:
        settings = bench_settings(settings)
    upgrade(settings)
    databases = settings.ledger_shards()
    engines = [sync_engine(db, "ledgerq-bench", pool_size=2) for db in databases]
    for each in engines:
        prepare_shop(each, reset=False)
    shards = [own_ledger_on(async_engine(db, "ledgerq-bench", pool_size=2)) for db in databases]
    return settings, engines, shards[0] if len(shards) == 1 else ShardedLedger(shards)


def _direct(
    bench: Bench, result: dict[str, Any], tasks: int, phase: Any, repeat: int, idle_rate: float
) -> None:
    """``--direct``: the direct drains and the idle latency (``idle_rate``: 0 skips it),
    then pgqueuer's drains (when installed, on PostgreSQL) in the same run."""
    run_direct(bench, result, tasks, phase, repeat)
    if idle_rate:
        direct_latency(bench, result, tasks, idle_rate, phase)
    bench.services.stop()
    if bench.settings.on_mysql:
        _skip_peer(result, "pgqueuer", "the pgqueuer peer", Console(stderr=True))
        return
    if not pgqueuer_installed():
        result["pgqueuer"] = "not installed (pip install 'ledgerq[dev]')"
        return
    pgq = PgqueuerPeer(bench.settings, bench.log_dir)
    runs = [
        pgq.drain(tasks, phase(f"drain, pgqueuer peer ({i + 1}/{repeat})", 1))
        for i in range(repeat)
    ]
    add_pgqueuer(result, runs)


def _cpus() -> int:
    return os.cpu_count() or 0


def _results(settings: Settings, waiters: int, as_json: bool) -> None:
    """``--results N``: the result() latency figure alone (ledgerq/bench/results.py)."""
    check_waiters(settings, waiters)
    settings, engines, ledger = _prepare(settings, 1)
    assert not isinstance(ledger, ShardedLedger)  # one database

    async def run() -> dict[str, Any]:
        try:
            await ledger.truncate()
            return await measure_results(settings, ledger, waiters)
        finally:
            await ledger.dispose()

    figure = asyncio.run(run())
    for each in engines:
        each.dispose()
    if as_json:
        click.echo(json.dumps({"results": figure}))
        return
    click.echo(
        f"result() latency, {figure['waiters']} waiters, ends in batches of {figure['batch']}: "
        f"p50 {figure['p50_ms']} ms, p90 {figure['p90_ms']} ms, p99 {figure['p99_ms']} ms, "
        f"max {figure['max_ms']} ms from the finish's send (its round trip: "
        f"{figure['finish_p50_ms']} ms p50; {figure['reads']} reads, "
        f"{figure['notifications']} notifications)"
    )
