"""``ledgerq relay`` and ``ledgerq reconcile`` (``ledgerq worker``: :mod:`.worker`;
what the service commands share, ``--app``, ``--tracing``, ``--metrics-port``:
:mod:`.options`).

Each builds its service through :mod:`ledgerq.compose` and runs it on
:func:`ledgerq.runtime.run_service`; SIGTERM stops it gracefully.
"""

from __future__ import annotations

import json
import logging

import click

from ledgerq.cli.group import json_option, pass_settings
from ledgerq.cli.options import load_tracing, metrics_port_option
from ledgerq.compose import serve_relay
from ledgerq.compose.relay import GRACE_S as RELAY_GRACE_S
from ledgerq.core.config import Settings
from ledgerq.ledger.validation import check_name
from ledgerq.relay.reconciler import ReconcileCounts, ReconcilerConfig
from ledgerq.relay.service import RelayConfig
from ledgerq.runtime import run_service

log = logging.getLogger("ledgerq")


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

    # Here, not at the top: `ledgerq relay` loads neither the reconciler's blocking
    # broker client nor the alert channels.
    from ledgerq.compose import serve_reconciler

    def report(counts: ReconcileCounts) -> None:
        click.echo(json.dumps(counts.as_dict()) if as_json else counts.line())

    run_service(serve_reconciler(settings, config, every, report), settings.event_loop)
