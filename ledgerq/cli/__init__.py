"""The ``ledgerq`` command: one group, every command registered here, explicitly.

Each command is registered by name, module and the first sentence of its help,
and its module is imported only when the command runs (:mod:`ledgerq.cli.lazy`):
``ledgerq stats`` does not import the benchmark, the demo, the worker or
Alembic, and ``ledgerq --help`` imports no command module at all.
"""

from __future__ import annotations

from ledgerq.cli.group import cli, run_cli
from ledgerq.cli.lazy import LazyCommand

#: Every command: its name, its module, the first sentence of its help (what the
#: listing of ``ledgerq --help`` shows; tests/unit/test_startup_imports.py checks
#: each against the command's own help).
COMMANDS = (
    LazyCommand(
        "migrate",
        "ledgerq.cli.inspect",
        "Create the database if missing and upgrade the ledger schema.",
    ),
    LazyCommand(
        "stats",
        "ledgerq.cli.inspect",
        "Counts by status and by kind, the due tasks no live worker serves, the live workers "
        "with what each serves, and each broker route's window.",
    ),
    LazyCommand(
        "show",
        "ledgerq.cli.inspect",
        "One task (by ID, or --key BUSINESS_KEY): every field, each attempt (start, end, "
        "worker, error) and the operator actions that touched it.",
    ),
    LazyCommand(
        "tasks",
        "ledgerq.cli.tasks",
        "Find tasks, and cancel, retry, reschedule or change them (audited).",
    ),
    LazyCommand(
        "queues",
        "ledgerq.cli.scheduling",
        "Pause and resume queues (the relay publishes nothing of a paused queue).",
    ),
    LazyCommand("kinds", "ledgerq.cli.scheduling", "Pause, resume and rate-limit kinds."),
    LazyCommand(
        "purge",
        "ledgerq.cli.purge",
        "Remove finished tasks older than their retention (or --older-than), in batches.",
    ),
    LazyCommand(
        "relay",
        "ledgerq.cli.services",
        "Publish due tasks to RabbitMQ with publisher confirms (runs until SIGTERM): to each "
        "broker route only what its live workers can start soon (its window), several tasks "
        "of one route and kind per message (envelopes).",
    ),
    LazyCommand(
        "worker",
        "ledgerq.cli.worker",
        "Run handlers for tasks delivered from RabbitMQ, or with --direct claimed straight "
        "from the ledger (runs until SIGTERM).",
    ),
    LazyCommand(
        "reconcile",
        "ledgerq.cli.services",
        "Re-publish stalled deliveries, expire dead leases and keep history within its "
        "retention (for a cron job).",
    ),
    LazyCommand(
        "demo",
        "ledgerq.cli.demo",
        "Run the pipeline end to end on this machine and print what the ledger says.",
    ),
    LazyCommand(
        "bench",
        "ledgerq.cli.bench",
        "Throughput and latency of the whole pipeline, next to a raw aio-pika ceiling.",
    ),
    LazyCommand(
        "config",
        "ledgerq.cli.config",
        "The effective settings, where each came from, with secrets masked.",
    ),
    LazyCommand(
        "dashboard",
        "ledgerq.cli.dashboard",
        "Serve the web dashboard: overview, tasks and actions (runs until SIGTERM).",
    ),
)
cli.add_lazy(COMMANDS)


def main() -> None:
    run_cli(cli)


__all__ = ["COMMANDS", "cli", "main"]
