"""The ``ledgerq`` command: one group, every command registered here, explicitly."""

from __future__ import annotations

from ledgerq.cli.bench import bench
from ledgerq.cli.config import config
from ledgerq.cli.dashboard import dashboard
from ledgerq.cli.demo import demo
from ledgerq.cli.group import cli, run_cli
from ledgerq.cli.inspect import migrate, show, stats
from ledgerq.cli.purge import purge
from ledgerq.cli.scheduling import kinds, queues
from ledgerq.cli.services import reconcile, relay
from ledgerq.cli.tasks import tasks
from ledgerq.cli.worker import worker

for command in (
    migrate,
    stats,
    show,
    tasks,
    queues,
    kinds,
    purge,
    relay,
    worker,
    reconcile,
    demo,
    bench,
    config,
    dashboard,
):
    cli.add_command(command)


def main() -> None:
    run_cli(cli)


__all__ = ["cli", "main"]
