"""``ledgerq migrate``, ``ledgerq stats`` and ``ledgerq show``."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerq.cli.group import emit, json_option, pass_settings
from ledgerq.compose import open_ledger
from ledgerq.ledger.config import Settings
from ledgerq.ledger.masking import mask_url
from ledgerq.ledger.pg import migrate as ledger_migrate

SHOW_FIELDS = (
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
)

#: The table view shows at most this many characters of a value (``--json`` shows all).
SHOW_MAX_CHARS = 2000


def shown(value: Any) -> str:
    """A value for the table view; a huge one (a payload) is cut, and says so."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    if len(text) <= SHOW_MAX_CHARS:
        return text
    return (
        f"{text[:SHOW_MAX_CHARS]}... [truncated: {len(text)} characters in all; "
        "--json shows the whole value]"
    )


@click.command()
@click.option("--revision", default="head", show_default=True)
@pass_settings
def migrate(settings: Settings, revision: str) -> None:
    """Create the database if missing and upgrade the ledger schema."""
    try:
        ledger_migrate.check_revision(revision)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--revision") from exc
    ledger_migrate.upgrade(settings, revision)
    click.echo(
        f"ledger schema at {ledger_migrate.current_revision(settings)} "
        f"({mask_url(settings.database_url)})"
    )


async def _stats(settings: Settings) -> dict[str, Any]:
    async with open_ledger(settings, "ledgerq-cli", pool_size=1) as ledger:
        return await ledger.stats()


async def _show(settings: Settings, task_id: int) -> dict[str, Any]:
    async with open_ledger(settings, "ledgerq-cli", pool_size=1) as ledger:
        return await ledger.show(task_id)


@click.command()
@json_option
@pass_settings
def stats(settings: Settings, as_json: bool) -> None:
    """Counts by status and by kind."""
    data = asyncio.run(_stats(settings))

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


@click.command()
@click.argument("task_id", type=int)
@json_option
@pass_settings
def show(settings: Settings, task_id: int, as_json: bool) -> None:
    """One task: status, attempts, last error and every other field.

    The table cuts long values (a huge payload) at 2,000 characters and says so;
    --json prints everything."""
    data = asyncio.run(_show(settings, task_id))

    def render(console: Console) -> None:
        table = Table(title=f"task {task_id}", show_header=False)
        table.add_column("field", style="bold")
        table.add_column("value", overflow="fold")
        for key in SHOW_FIELDS:
            table.add_row(key, Text(shown(data.get(key))))  # Text: never read as markup
        console.print(table)

    emit(data, as_json, render)
