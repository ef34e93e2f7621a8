"""The ``ledgerq`` command group and the ledger's own commands (migrate, stats, show).

The relay and consumers packages add their commands to this group (layering:
``ledger`` knows nothing of them); ``consumers.cli:main`` is the entry point.
Errors a person can act on (a service that cannot be reached, bad input, an
unknown task) print one line and exit 2, never a traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from sqlalchemy.exc import OperationalError

from ledger import inspect as ledger_inspect
from ledger import migrate as ledger_migrate
from ledger.config import Settings
from ledger.db import check_database, display_url, first_line, sync_engine
from ledger.errors import LedgerqError, ServiceUnavailableError

pass_settings = click.make_pass_decorator(Settings)


@click.group()
@click.option(
    "--database-url",
    envvar="LEDGERQ_DATABASE_URL",
    default=None,
    help="SQLAlchemy URL of the ledger (env LEDGERQ_DATABASE_URL).",
)
@click.option(
    "--amqp-url",
    envvar="LEDGERQ_AMQP_URL",
    default=None,
    help="RabbitMQ URL (env LEDGERQ_AMQP_URL).",
)
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def cli(ctx: click.Context, database_url: str | None, amqp_url: str | None, verbose: int) -> None:
    """ledgerq: tasks kept in a PostgreSQL ledger, moved through RabbitMQ."""
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if verbose < 2:
        # aiormq logs every failed connect attempt with a traceback-like line; ledgerq
        # reports an unreachable broker itself, in one line.
        logging.getLogger("aiormq").setLevel(logging.CRITICAL)
        logging.getLogger("pika").setLevel(logging.CRITICAL)
    ctx.obj = Settings.from_env(database_url=database_url, amqp_url=amqp_url)


def run_cli(group: click.Group) -> None:
    """Invoke ``group``, turning ledgerq's own errors into one line and exit code 2."""
    try:
        group.main(standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except LedgerqError as exc:
        click.echo(f"ledgerq: {exc}", err=True)
        sys.exit(2)
    except OperationalError as exc:
        url = display_url(Settings.from_env().database_url)
        error = ServiceUnavailableError("PostgreSQL", url, first_line(exc.orig or exc))
        click.echo(f"ledgerq: {error}", err=True)
        sys.exit(2)


def run_service(main: Coroutine[Any, Any, None]) -> None:
    """Run a long-lived service's coroutine on uvloop (asyncio's loop with
    ``LEDGERQ_EVENT_LOOP=asyncio``): the relay and workers spend much of their CPU
    in the event loop's socket handling, which uvloop does in C."""
    if os.environ.get("LEDGERQ_EVENT_LOOP", "uvloop") == "asyncio":
        asyncio.run(main)
        return
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main)


def install_stop_handlers(stop: Callable[[], None]) -> None:
    """Call ``stop`` on the first SIGTERM or SIGINT (graceful shutdown)."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop)


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        render(Console())


@cli.command()
@click.option("--revision", default="head", show_default=True)
@pass_settings
def migrate(settings: Settings, revision: str) -> None:
    """Create the database if missing and upgrade the ledger schema."""
    ledger_migrate.upgrade(settings, revision)
    click.echo(
        f"ledger schema at {ledger_migrate.current_revision(settings)} "
        f"({display_url(settings.database_url)})"
    )


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON for a machine.")
@pass_settings
def stats(settings: Settings, as_json: bool) -> None:
    """Counts by status and by kind."""
    check_database(settings)
    engine = sync_engine(settings, "ledgerq-cli", pool_size=1)
    with engine.connect() as conn:
        data = ledger_inspect.stats(conn)
    engine.dispose()

    def render(console: Console) -> None:
        table = Table(title=f"ledgerq: {data['total']} tasks")
        statuses = sorted(data["by_status"])
        table.add_column("kind")
        for status in statuses:
            table.add_column(status, justify="right")
        for kind, counts in sorted(data["by_kind"].items()):
            table.add_row(kind, *(str(counts.get(s, 0)) for s in statuses))
        table.add_row("[b]all[/b]", *(f"[b]{data['by_status'][s]}[/b]" for s in statuses))
        console.print(table)

    emit(data, as_json, render)


@cli.command()
@click.argument("task_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="Print JSON for a machine.")
@pass_settings
def show(settings: Settings, task_id: int, as_json: bool) -> None:
    """One task: status, attempts, last error and every other field."""
    check_database(settings)
    engine = sync_engine(settings, "ledgerq-cli", pool_size=1)
    with engine.connect() as conn:
        data = ledger_inspect.show(conn, task_id)
    engine.dispose()

    def render(console: Console) -> None:
        table = Table(title=f"task {task_id}", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for key in (
            "kind",
            "status",
            "location",
            "attempts",
            "max_attempts",
            "queue",
            "priority",
            "run_at",
            "created_at",
            "published_at",
            "started_at",
            "finished_at",
            "worker",
            "epoch",
            "business_key",
            "payload",
            "retry",
            "last_error",
        ):
            value = data.get(key)
            table.add_row(key, "" if value is None else str(value))
        console.print(table)

    emit(data, as_json, render)
