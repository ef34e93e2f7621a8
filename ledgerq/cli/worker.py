"""``ledgerq worker``: consume tasks (through RabbitMQ, or ``--direct`` from the
ledger), one process or a supervisor of ``--processes N`` children.

It builds its service through :mod:`ledgerq.compose` and runs it on
:func:`ledgerq.runtime.run_service`; SIGTERM drains it gracefully.
"""

from __future__ import annotations

import logging
import os
import sys

import click

from ledgerq.cli.group import pass_settings
from ledgerq.cli.options import ProcessesError, load_app, metrics_port_option
from ledgerq.compose import serve_worker
from ledgerq.compose.supervisor import MAX_PROCESSES, SupervisorConfig, supervise
from ledgerq.consumers.direct import DirectConfig, FallbackConfig
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.consumers.worker_config import BatchConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.routing import RoutingError, parse_kinds, parse_queues, parse_shards
from ledgerq.processes import (
    HARD_STOP_S,
    SUPERVISED_ENV,
    child_argv,
    report_hung,
    watch_parent,
)
from ledgerq.runtime import run_service

log = logging.getLogger("ledgerq")


def _processes_mode(processes: int | None, hang_limit_s: float) -> float:
    """Check ``--processes``; the hang limit to run with (a child of ``--processes``,
    :data:`SUPERVISED_ENV` set: a sync handler's timeout ends it, ledgerq.processes)."""
    if processes is not None and not 1 <= processes <= MAX_PROCESSES:
        raise ProcessesError(f"--processes must be 1..{MAX_PROCESSES}, got {processes}")
    report = os.environ.get(SUPERVISED_ENV)
    if not report:
        return hang_limit_s
    report_hung(report)
    watch_parent()
    return HARD_STOP_S


@click.command("worker")
@click.option("--app", "app", required=True, help="Module whose @task handlers to run.")
@click.option(
    "--queues",
    default="default",
    show_default=True,
    help="Comma-separated ledger queues to consume; queue=N gives each its own "
    "concurrency (fast=50,slow=2), so a slow queue never starves a fast one.",
)
@click.option(
    "--kinds",
    default=None,
    help="Serve only these kinds (comma-separated), routed by RabbitMQ: other kinds "
    "wait in the ledger for a worker that serves them.",
)
@click.option(
    "--shards",
    default=None,
    help="Serve only these shards of LEDGERQ_SHARDS (0-3, 0,2,5-7), routed by RabbitMQ; "
    "auto: the live --shards auto workers of the same queues and kinds split them among "
    "themselves, and take over a dead one's within seconds.",
)
@click.option("--concurrency", default=WorkerConfig.concurrency, show_default=True)
@click.option("--prefetch", default=0, show_default=True, help="0 means 2 x concurrency.")
@click.option(
    "--db-pool",
    default=WorkerConfig.db_pool,
    show_default=True,
    help="Database connections handlers' ctx.session may use at once.",
)
@click.option("--lease", "lease_s", default=WorkerConfig.lease_s, show_default=True)
@click.option(
    "--default-timeout",
    default=WorkerConfig.default_timeout_s,
    show_default=True,
    help="Seconds an attempt may run when neither the task nor its @task sets a timeout "
    "(0: no limit).",
)
@click.option(
    "--grace",
    "grace_s",
    default=WorkerConfig.grace_s,
    show_default=True,
    help="Seconds in-flight tasks get to finish after SIGTERM.",
)
@click.option(
    "--hang-limit",
    "hang_limit_s",
    default=WorkerConfig.hang_limit_s,
    show_default=True,
    help="Seconds a sync handler may run past its timeout (its retry waits for it) before "
    "the worker exits with code 70 so that the task is retried elsewhere.",
)
@click.option(
    "--batch-commit/--no-batch-commit",
    default=True,
    show_default=True,
    help="Commit handlers that write through ctx.session in batched windows, a savepoint "
    "each (see docs/design.md); --no-batch-commit: one transaction per task.",
)
@click.option(
    "--direct",
    is_flag=True,
    help="Claim due tasks straight from the ledger, with no broker connection at all "
    "(no relay needed): for a small deployment or a test environment without RabbitMQ.",
)
@click.option(
    "--direct-batch",
    default=DirectConfig.batch,
    show_default=True,
    help="With --direct: most tasks one claim takes.",
)
@click.option(
    "--direct-poll",
    "direct_poll_s",
    type=float,
    default=None,
    help="With --direct: seconds between looks at the ledger when no enqueue wakes it "
    f"[default: {DirectConfig.poll_s:g} on PostgreSQL, where LISTEN wakes the worker; "
    f"{DirectConfig.mysql_poll_s:g} on MySQL / MariaDB, where polling is the only wake-up].",
)
@click.option(
    "--broker-fallback",
    "broker_fallback_s",
    default=FallbackConfig.after_s,
    show_default=True,
    help="Seconds the broker connection may be down before the worker claims due tasks "
    "straight from the ledger until it is back (0: never).",
)
@click.option(
    "--processes",
    type=int,
    default=None,
    help="Run N worker processes, each with --concurrency slots, under one supervisor "
    "that restarts a dead one, drains them all on SIGTERM and serves one --metrics-port; "
    "a sync handler past its timeout is stopped with its process (docs/howto.md).",
)
@metrics_port_option
@pass_settings
def worker(
    settings: Settings,
    db_pool: int,
    default_timeout: float,
    app: str,
    queues: str,
    kinds: str | None,
    shards: str | None,
    concurrency: int,
    prefetch: int,
    lease_s: float,
    grace_s: float,
    hang_limit_s: float,
    metrics_port: int | None,
    batch_commit: bool,
    direct: bool,
    direct_batch: int,
    direct_poll_s: float | None,
    broker_fallback_s: float,
    processes: int | None,
) -> None:
    """Run handlers for tasks delivered from RabbitMQ, or with --direct claimed straight
    from the ledger (runs until SIGTERM)."""
    hang_limit_s = _processes_mode(processes, hang_limit_s)
    registry = load_app(app)
    try:
        lanes = parse_queues(queues)
        served_kinds = parse_kinds(kinds)
        auto = shards is not None and shards.strip().lower() == "auto"
        served_shards = None if auto else parse_shards(shards, settings.shards)
    except RoutingError as exc:
        raise click.BadParameter(str(exc)) from exc
    unknown = sorted((served_kinds or frozenset()) - {h.kind for h in registry})
    if unknown:
        raise click.BadParameter(f"--kinds names {unknown[0]!r}, which {app} has no @task for")
    # queue=N: one lane (claims, slots, prefetch) per queue; else one for all.
    groups = (
        [((name,), limit or concurrency) for name, limit in lanes]
        if lanes[0][1] is not None
        else [(tuple(name for name, _ in lanes), concurrency)]
    )
    try:
        configs = [
            WorkerConfig(
                queues=names,
                kinds=served_kinds,
                shards=served_shards,
                auto_shards=settings.shards if auto else None,
                concurrency=lane_concurrency,
                prefetch=prefetch,
                db_pool=db_pool,
                lease_s=lease_s,
                heartbeat_s=lease_s / 4,
                grace_s=grace_s,
                hang_limit_s=hang_limit_s,
                default_timeout_s=default_timeout or None,
                batch=BatchConfig(enabled=batch_commit),
            )
            for names, lane_concurrency in groups
        ]
        direct_config = (
            DirectConfig(
                batch=direct_batch,
                poll_s=(
                    DirectConfig.default_poll_s(mysql=settings.on_mysql)
                    if direct_poll_s is None
                    else direct_poll_s
                ),
                aging_s=settings.priority_aging_s,
            )
            if direct
            else None
        )
        fallback = FallbackConfig(after_s=broker_fallback_s) if broker_fallback_s else None
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if direct and (served_kinds or served_shards or auto):
        raise click.BadParameter(
            "--direct claims every kind its app registers, on every shard of its queues: "
            "it cannot be given --kinds or --shards (those route through RabbitMQ)"
        )
    if processes is not None:
        supervisor = SupervisorConfig(processes, grace_s=grace_s)
        argv = child_argv(sys.argv[1:])
        port = metrics_port or settings.metrics_port
        sys.exit(run_service(supervise(settings, argv, supervisor, port), settings.event_loop))
    drained = run_service(
        serve_worker(settings, registry, configs, metrics_port or 0, direct_config, fallback),
        settings.event_loop,
    )
    problem = drained.problem()
    if drained.threads_running:
        # A sync handler's thread cannot be stopped; waiting for it would hang the exit.
        log.warning(
            "%d sync handlers still running past the grace; exiting anyway",
            drained.threads_running,
        )
        logging.shutdown()
        if problem is not None:
            click.echo(f"ledgerq: {problem}", err=True)
        os._exit(0 if problem is None else problem.exit_code)
    if problem is not None:
        raise problem  # one line, exit 69
