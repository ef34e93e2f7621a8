"""The ``ledgerq`` command group, shared options, and how errors reach a person.

Commands are registered explicitly in :mod:`ledgerq.cli`. Errors a person can
act on (a service that cannot be reached, bad input, an unknown task) print one
line and exit 2, never a traceback.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from typing import Any

import click
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from sqlalchemy.exc import OperationalError

from ledgerq.ledger.config import Settings
from ledgerq.ledger.errors import LedgerqError, ServiceUnavailableError
from ledgerq.ledger.pg.base import first_line
from ledgerq.ledger.pg.engines import display_url

pass_settings = click.make_pass_decorator(Settings)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for a machine.")


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
    except OperationalError as exc:  # from a command's own engine (migrate, demo, bench)
        url = display_url(Settings.from_env().database_url)
        error = ServiceUnavailableError("PostgreSQL", url, first_line(exc.orig or exc))
        click.echo(f"ledgerq: {error}", err=True)
        sys.exit(2)


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        render(Console())


def progress_bar(console: Console, *, width: int = 0, transient: bool = False) -> Progress:
    """The progress bar every long command shows: description, bar, n/total, elapsed."""
    description = f"{{task.description:<{width}}}" if width else "{task.description}"
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )
