"""``ledgerq relay``, ``ledgerq worker`` and ``ledgerq reconcile``: the services.

Each builds its service through :mod:`ledgerq.compose` and runs it on
:func:`ledgerq.runtime.run_service`; SIGTERM stops it gracefully.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import sys

import click

from ledgerq.cli.group import EX_USAGE, json_option, pass_settings
from ledgerq.compose import serve_reconciler, serve_relay, serve_worker
from ledgerq.compose.relay import GRACE_S as RELAY_GRACE_S
from ledgerq.compose.supervisor import MAX_PROCESSES, SupervisorConfig, supervise
from ledgerq.consumers.direct import DirectConfig, FallbackConfig
from ledgerq.consumers.registry import Registry, default_registry
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.consumers.worker_config import BatchConfig
from ledgerq.core.config import Settings
from ledgerq.core.errors import LedgerqError
from ledgerq.ledger.routing import RoutingError, parse_kinds, parse_queues, parse_shards
from ledgerq.ledger.validation import check_name
from ledgerq.processes import (
    HARD_STOP_S,
    SUPERVISED_ENV,
    child_argv,
    report_hung,
    watch_parent,
)
from ledgerq.relay.reconciler import ReconcileCounts, ReconcilerConfig
from ledgerq.relay.service import RelayConfig
from ledgerq.runtime import run_service

log = logging.getLogger("ledgerq")

metrics_port_option = click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus /metrics, /healthz and /readyz on this port "
    "(env LEDGERQ_METRICS_PORT; default: none).",
)


class AppImportError(LedgerqError):
    """``--app`` names a module that cannot be imported (a usage error: exit 64)."""

    exit_code = EX_USAGE


def load_app(module: str) -> Registry:
    """Import the user's module so its ``@task`` decorators run."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise AppImportError(f"cannot import --app {module!r}: {exc}") from exc
    if not len(default_registry):
        raise AppImportError(f'--app {module!r} registered no handlers (use @task("kind"))')
    return default_registry


class ProcessesError(LedgerqError):
    """``--processes`` out of range (a usage error: one line, exit 64)."""

    exit_code = EX_USAGE


class TracingSetupError(LedgerqError):
    """``--tracing`` names a module or function that cannot be loaded (exit 64)."""

    exit_code = EX_USAGE


def load_tracing(path: str) -> None:
    """Import ``module`` (and call ``module:function`` with no arguments) so that it
    configures OpenTelemetry, typically ``trace.set_tracer_provider(...)`` with an
    exporter: the relay's ``publish`` spans go to the provider it sets, as a
    worker's ``process`` spans go to the one its ``--app`` module sets."""
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    module_name, _, function = path.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised as it ran
        raise TracingSetupError(
            f"cannot import --tracing {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    if not function:
        return
    setup = getattr(module, function, None)
    if not callable(setup):
        raise TracingSetupError(f"--tracing {path!r}: {module_name} has no function {function!r}")
    try:
        setup()
    except Exception as exc:
        raise TracingSetupError(f"--tracing {path!r} failed: {type(exc).__name__}: {exc}") from None


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


@click.command("relay")
@click.option("--batch-size", default=RelayConfig.batch_size, show_default=True)
@click.option(
    "--poll-interval",
    default=RelayConfig.poll_interval,
    show_default=True,
    help="Seconds between polls when no notification arrives.",
)
@click.option("--confirm-timeout", default=RelayConfig.confirm_timeout, show_default=True)
@click.option(
    "--envelope-max",
    default=RelayConfig.envelope_max,
    show_default=True,
    help="Most tasks of one route and kind one message carries (1: one task per message).",
)
@click.option(
    "--envelope-long",
    "envelope_long_s",
    default=RelayConfig.envelope_long_s,
    show_default=True,
    help="Seconds: a kind whose attempts run this long on average goes one task per message.",
)
@click.option(
    "--ledger-shard",
    "ledger_shards",
    type=click.IntRange(min=0),
    multiple=True,
    metavar="K",
    help="Serve only ledger shard K (its position in LEDGERQ_DATABASE_URL); repeatable. "
    "Default: every shard, one relay loop each.",
)
@click.option(
    "--tracing",
    default=None,
    metavar="MODULE[:FUNCTION]",
    help="Import MODULE (and call FUNCTION) at start to configure OpenTelemetry "
    "(trace.set_tracer_provider with your exporter): the relay's publish spans go there.",
)
@click.option(
    "--grace",
    "grace_s",
    type=click.FloatRange(min=0),
    default=RELAY_GRACE_S,
    show_default=True,
    help="Seconds the batch in hand gets to finish after SIGTERM (then its rows stay pending).",
)
@metrics_port_option
@pass_settings
def relay(
    settings: Settings,
    batch_size: int,
    poll_interval: float,
    confirm_timeout: float,
    envelope_max: int,
    envelope_long_s: float,
    ledger_shards: tuple[int, ...],
    tracing: str | None,
    grace_s: float,
    metrics_port: int | None,
) -> None:
    """Publish due tasks to RabbitMQ with publisher confirms (runs until SIGTERM):
    to each broker route only what its live workers can start soon (its window),
    several tasks of one route and kind per message (envelopes)."""
    try:
        config = RelayConfig(
            batch_size,
            poll_interval,
            confirm_timeout,
            aging_s=settings.priority_aging_s,
            envelope_max=envelope_max,
            envelope_long_s=envelope_long_s,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    if tracing:
        load_tracing(tracing)
    served = sorted(set(ledger_shards)) or None
    run_service(
        serve_relay(settings, config, metrics_port or 0, served, grace_s), settings.event_loop
    )


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
    default=DirectConfig.poll_s,
    show_default=True,
    help="With --direct: seconds between looks at the ledger when no enqueue wakes it.",
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
    direct_poll_s: float,
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
                batch=direct_batch, poll_s=direct_poll_s, aging_s=settings.priority_aging_s
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


def _parse_queue_stalls(values: tuple[str, ...]) -> dict[str, float]:
    stalls: dict[str, float] = {}
    for value in values:
        name, sep, seconds = value.partition("=")
        try:
            check_name(name, "queue")
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--queue-stall") from exc
        try:
            stalls[name] = float(seconds)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise click.BadParameter(
                f"expected QUEUE=SECONDS, got {value!r}", param_hint="--queue-stall"
            )
    return stalls


@click.command("reconcile")
@click.option(
    "--every",
    type=click.FloatRange(min=1.0),
    default=None,
    help="Loop, one pass every SECONDS (default: one pass, then exit).",
)
@click.option(
    "--stall",
    "stall_s",
    default=ReconcilerConfig.stall_s,
    show_default=True,
    help="Seconds a published task may wait unclaimed before it is re-published.",
)
@click.option(
    "--queue-stall",
    multiple=True,
    metavar="QUEUE=SECONDS",
    help="A per-queue stall window (repeatable).",
)
@click.option("--page-size", default=ReconcilerConfig.page_size, show_default=True)
@json_option
@pass_settings
def reconcile(
    settings: Settings,
    every: float | None,
    stall_s: float,
    queue_stall: tuple[str, ...],
    page_size: int,
    as_json: bool,
) -> None:
    """Re-publish stalled deliveries, expire dead leases and keep history within its
    retention (for a cron job)."""
    try:
        config = ReconcilerConfig(
            stall_s,
            _parse_queue_stalls(queue_stall),
            page_size,
            aging_s=settings.priority_aging_s,
        )
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc

    def report(counts: ReconcileCounts) -> None:
        click.echo(json.dumps(counts.as_dict()) if as_json else counts.line())

    run_service(serve_reconciler(settings, config, every, report), settings.event_loop)
