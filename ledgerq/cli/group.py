"""The ``ledgerq`` command group, the global options, and how errors reach a person.

Commands are registered explicitly in :mod:`ledgerq.cli`, each imported when it
runs (:class:`~ledgerq.cli.lazy.LazyGroup`). The global options
are the settings of :data:`ledgerq.core.config.SETTINGS` that have a flag;
each also reads its environment variable, and every value is validated before
any command runs. An error a person can act on prints one line per problem,
starting ``ledgerq:``, never a traceback, with secrets masked, and the exit code
says what kind of problem it is (BSD ``sysexits``, see :func:`exit_code`):

==  =====================================================================
0   success
1   any other failure (an unknown task, a failed check, a bug)
64  ``EX_USAGE``: the command line is wrong (click's usage errors, ``--app``)
69  ``EX_UNAVAILABLE``: PostgreSQL or RabbitMQ cannot be reached within the
    connect wait, refuses the credentials, or drops out during the command
78  ``EX_CONFIG``: a setting is malformed or unsupported, or the ledger schema
    is missing or outdated ("run `ledgerq migrate`")
130 interrupted
==  =====================================================================

Every log record and every error line goes through one masking function
(:mod:`ledgerq.core.masking`), given the passwords of the configured URLs
and the SMTP password. ``--log-format json`` writes each record as one JSON
object, naming the task it is about (:mod:`ledgerq.core.logs`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import click
from sqlalchemy.exc import OperationalError

from ledgerq.broker.base import BrokerConnectionError
from ledgerq.cli.lazy import LazyGroup
from ledgerq.core.config import Settings
from ledgerq.core.errors import (
    ConfigError,
    LedgerqError,
    SchemaError,
    SchemaMissingError,
    ServiceUnavailableError,
    TransientStorageError,
    first_line,
)
from ledgerq.core.logs import JsonFormatter, TaskFields
from ledgerq.core.masking import SecretFilter, mask_text, secrets_of
from ledgerq.core.settings_table import BY_FIELD

if TYPE_CHECKING:
    # Imported where they render: the service commands (relay, worker, reconcile)
    # print no table and no progress bar.
    from rich.console import Console
    from rich.progress import Progress

EX_OK = 0
EX_FAILURE = 1
EX_USAGE = 64
EX_UNAVAILABLE = 69
EX_CONFIG = 78
EX_INTERRUPTED = 130

pass_settings = click.make_pass_decorator(Settings)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON for a machine.")

#: Masks every log record and error line; its secrets are set when settings are read.
SECRETS = SecretFilter()


class SchemaTracebacks(logging.Filter):
    """A lost schema is a configuration problem, reported in one line when the
    service stops: a log record that carries a SchemaMissingError keeps its message
    and drops the traceback (a service loop logs the failed statement first)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info and isinstance(record.exc_info[1], SchemaMissingError):
            record.exc_info = None
            record.exc_text = None
        return True


class LostPooledConnections(logging.Filter):
    """A pooled connection the database killed or lost while it was checked out is
    an outage the service reports itself, in one line: SQLAlchemy's pool, returning
    it, fails to roll it back and logs that at ERROR with a traceback, then
    discards the connection (the next checkout opens a new one). That record
    becomes one WARNING line naming the error, without the traceback. Any other
    failed reset keeps its traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith("sqlalchemy.pool") or not record.exc_info:
            return True
        error = record.exc_info[1]
        if (
            error is not None
            and type(error).__name__ == "OperationalError"
            and str(record.msg).startswith("Exception during reset")
        ):
            record.msg = "a pooled database connection was lost (%s); discarded"
            record.args = (first_line(error),)
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = None
            record.exc_text = None
        return True


TRACEBACKS = SchemaTracebacks()
LOST_CONNECTIONS = LostPooledConnections()
#: Names the running task on every record logged while its handler runs.
TASK_FIELDS = TaskFields()


class _Current:
    """The settings of this run, once read (for errors raised after the command)."""

    settings: Settings | None = None


def _help(field: str, default: str = "") -> str:
    setting = BY_FIELD[field]
    where = f"env {setting.env}" + (f"; default {default}" if default else "")
    return f"{setting.help[0].upper()}{setting.help[1:]} ({where})."


@click.group(cls=LazyGroup)
@click.version_option(package_name="ledgerq", prog_name="ledgerq")
@click.option("--database-url", metavar="URL", default=None, help=_help("database_url"))
@click.option("--amqp-url", metavar="URL", default=None, help=_help("amqp_url"))
@click.option("--amqp-prefix", metavar="TEXT", default=None, help=_help("amqp_prefix", "ledgerq"))
@click.option(
    "--queue-type", metavar="classic|quorum", default=None, help=_help("queue_type", "classic")
)
@click.option("--connect-wait", metavar="SECONDS", default=None, help=_help("connect_wait_s", "10"))
@click.option(
    "--event-loop", metavar="uvloop|asyncio", default=None, help=_help("event_loop", "uvloop")
)
@click.option("--log-format", metavar="text|json", default=None, help=_help("log_format", "text"))
@click.option("-v", "--verbose", count=True, help="More logging (-v info, -vv debug).")
@click.pass_context
def cli(
    ctx: click.Context,
    database_url: str | None,
    amqp_url: str | None,
    amqp_prefix: str | None,
    queue_type: str | None,
    connect_wait: str | None,
    event_loop: str | None,
    log_format: str | None,
    verbose: int,
) -> None:
    """ledgerq: tasks kept in a PostgreSQL ledger, moved through RabbitMQ."""
    raw_urls = (
        database_url or os.environ.get("LEDGERQ_DATABASE_URL", ""),
        amqp_url or os.environ.get("LEDGERQ_AMQP_URL", ""),
    )
    SECRETS.secrets.update(secrets_of(*raw_urls))
    _configure_logging(verbose)
    settings = Settings.from_env(
        database_url=database_url,
        amqp_url=amqp_url,
        amqp_prefix=amqp_prefix,
        queue_type=queue_type,
        connect_wait_s=connect_wait,
        event_loop=event_loop,
        log_format=log_format,
    )
    SECRETS.secrets.update(secrets_of(*settings.secret_urls()))
    SECRETS.secrets.update(settings.passwords())
    if settings.log_format == "json":
        for handler in logging.getLogger().handlers:
            handler.setFormatter(JsonFormatter())
    ctx.obj = _Current.settings = settings


def _configure_logging(verbose: int) -> None:
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    for handler in logging.getLogger().handlers:
        # in this order: mask what is left
        for log_filter in (TRACEBACKS, LOST_CONNECTIONS, SECRETS, TASK_FIELDS):
            if log_filter not in handler.filters:
                handler.addFilter(log_filter)
    if verbose < 2:
        # aiormq logs every failed connect attempt with a traceback-like line; ledgerq
        # reports an unreachable broker itself, in one line.
        logging.getLogger("aiormq").setLevel(logging.CRITICAL)
        logging.getLogger("pika").setLevel(logging.CRITICAL)


def exit_code(exc: BaseException) -> int:
    """The ``sysexits`` code for an error that reached the command line."""
    code = getattr(exc, "exit_code", None)
    if isinstance(code, int) and isinstance(exc, LedgerqError):
        return code
    if isinstance(exc, ConfigError | SchemaError):
        return EX_CONFIG
    if isinstance(exc, ServiceUnavailableError | TransientStorageError | BrokerConnectionError):
        return EX_UNAVAILABLE
    return EX_FAILURE


def fail(message: str, code: int) -> None:
    """Print ``message`` (one ``ledgerq:`` line per line, secrets masked) and exit."""
    for line in mask_text(message, SECRETS.secrets).splitlines() or [""]:
        click.echo(f"ledgerq: {line}", err=True)
    sys.exit(code)


def run_cli(
    group: click.Group,
    args: Sequence[str] | None = None,
    prog_name: str | None = None,
    default_map: dict[str, Any] | None = None,
) -> None:
    """Invoke ``group``, turning every error a person can act on into one line per
    problem and its exit code (see the module docstring). ``args`` default to the
    command line; ``prog_name`` and ``default_map`` (click's per-command defaults)
    are for a front end such as Django's ``manage.py ledgerq``."""
    try:
        group.main(args=args, prog_name=prog_name, default_map=default_map, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(EX_INTERRUPTED)
    except click.UsageError as exc:
        exc.show()
        sys.exit(EX_USAGE)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except LedgerqError as exc:
        fail(str(exc), exit_code(exc))
    except OperationalError as exc:  # from a command's own engine (migrate, demo, bench)
        url = (_Current.settings or Settings()).database_url
        error = ServiceUnavailableError("PostgreSQL", url, first_line(exc.orig or exc))
        fail(str(error), EX_UNAVAILABLE)


def emit(data: Any, as_json: bool, render: Callable[[Console], None]) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
    else:
        from rich.console import Console

        render(Console())


def progress_bar(console: Console, *, width: int = 0, transient: bool = False) -> Progress:
    """The progress bar every long command shows: description, bar, n/total, elapsed."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    description = f"{{task.description:<{width}}}" if width else "{task.description}"
    return Progress(
        TextColumn(description),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        transient=transient,
    )
