"""``ledgerq migrate``, ``ledgerq stats`` and ``ledgerq show``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import click
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerq import admin
from ledgerq.cli.group import emit, json_option, pass_settings
from ledgerq.core.config import Settings
from ledgerq.core.masking import mask_url
from ledgerq.ledger.actions import children_text, progress_text, status_text
from ledgerq.ledger.after import graph_text

SHOW_FIELDS = (
    "kind",
    "status",
    "location",
    "attempts",
    "max_attempts",
    "queue",
    "priority",
    "tags",
    "run_at",
    "expires_at",
    "created_at",
    "published_at",
    "started_at",
    "finished_at",
    "worker",
    "sticky_worker",
    "sticky_until",
    "epoch",
    "business_key",
    "payload",
    "retry",
    "last_error",
    "result",
    "checkpoint",
    "progress",
    "cancel_requested_at",
)
ATTEMPT_FIELDS = ("attempt", "worker", "started_at", "ended_at", "outcome", "error")
AUDIT_FIELDS = ("id", "at", "actor", "action", "reason", "outcome")

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
    # Here, not at the top: `stats` and `show` need neither the storage module nor
    # the broker client it names.
    from ledgerq.compose import storage as ledger_migrate

    try:
        ledger_migrate.check_revision(revision, settings)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--revision") from exc
    ledger_migrate.upgrade(settings, revision)
    count = settings.ledger_shard_count
    for index, shard in enumerate(settings.ledger_shards()):
        where = mask_url(shard.database_url)
        if count > 1:
            where += f", ledger shard {index} of {count}"
        click.echo(f"ledger schema at {ledger_migrate.current_revision(shard)} ({where})")


@click.command()
@json_option
@pass_settings
def stats(settings: Settings, as_json: bool) -> None:
    """Counts by status and by kind, the due tasks no live worker serves, the
    live workers with what each serves, and each broker route's window."""
    data = admin.stats(settings).to_json()

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
        columns = ("queue", "kind", "shard", "tasks", "oldest")
        _print_rows(
            console,
            "pending, served by no live worker (never attempted; waits for one)",
            columns,
            [[str(row[c]) for c in columns] for row in data["unserved"]],
        )
        _print_rows(
            console,
            "live workers",
            ("worker", "queue", "kinds", "shards", "since"),
            [
                [
                    row["worker"],
                    row["queue"],
                    _listed(row["kinds"], "every kind"),
                    _listed(row["shards"], "every shard") + (" (auto)" if row["auto"] else ""),
                    row["since"],
                ]
                for row in data["workers"]
            ],
        )
        columns = ("queue", "route", "capacity", "published", "room")
        _print_rows(
            console,
            "broker windows (the rest waits in the ledger)",
            columns,
            [[str(row[c]) or "(own queue)" for c in columns] for row in data["windows"]],
        )

    emit(data, as_json, render)


def _print_rows(
    console: Console, title: str, columns: Sequence[str], rows: list[list[str]]
) -> None:
    """A titled table of text cells, printed only when it has rows."""
    if not rows:
        return
    table = Table(title=title)
    for column in columns:
        table.add_column(column)
    for row in rows:
        table.add_row(*row)
    console.print(table)


def _listed(values: Sequence[Any] | None, every: str) -> str:
    """A subscription's kinds or shards; None means all of them."""
    return every if values is None else ", ".join(map(str, values))


@click.command()
@click.argument("task_id", type=int, required=False)
@click.option("--key", default=None, metavar="BUSINESS_KEY", help="The newest task with this key.")
@json_option
@pass_settings
def show(settings: Settings, task_id: int | None, key: str | None, as_json: bool) -> None:
    """One task (by ID, or --key BUSINESS_KEY): every field, each attempt (start,
    end, worker, error) and the operator actions that touched it.

    The table cuts long values (a huge payload) at 2,000 characters and says so;
    --json prints everything."""
    if (task_id is None) == (key is None):
        raise click.UsageError("give a task ID or --key BUSINESS_KEY (one of them)")
    data = admin.show(settings, task_id, key=key).to_json()
    emit(data, as_json, lambda console: render_task(console, data))


def attempt_cells(entry: dict[str, Any]) -> list[Text]:
    """One attempt's row: times to the millisecond, the error's last line (the
    exception itself; --json keeps the whole traceback)."""
    error = str(entry.get("error") or "").strip().splitlines()
    values = {**entry, "error": error[-1] if error else None}
    for name in ("started_at", "ended_at"):
        values[name] = str(values.get(name) or "").replace("T", " ")[:23]
    return [Text(shown(values.get(name))) for name in ATTEMPT_FIELDS]


def field_text(key: str, data: dict[str, Any]) -> str:
    """How ``ledgerq show`` writes one field of a task."""
    if key == "progress":
        return progress_text(data.get(key))
    if key == "status":
        return status_text(data)
    if key == "max_attempts" and data.get(key) is None:
        return "(the kind's default, filled in by the first claim)"
    return shown(data.get(key))


def render_task(console: Console, data: dict[str, Any]) -> None:
    table = Table(title=f"task {data['id']}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    for key in SHOW_FIELDS:
        table.add_row(key, Text(field_text(key, data)))  # Text: never read as markup
    if data.get("children"):
        table.add_row("children", Text(children_text(data["children"])))
    for side in ("dependencies", "dependents"):
        if data.get(side):
            table.add_row(side, Text(graph_text(data[side])))
    console.print(table)
    attempts = Table(title="attempts")
    for name in ATTEMPT_FIELDS:
        attempts.add_column(name, overflow="fold")
    for entry in data["attempt_log"]:
        attempts.add_row(*attempt_cells(entry))
    console.print(attempts if data["attempt_log"] else "attempts: none ended yet")
    audit = Table(title="audit")
    for name in AUDIT_FIELDS:
        audit.add_column(name, overflow="fold")
    for entry in data["audit"]:
        audit.add_row(*(Text(shown(entry.get(name))) for name in AUDIT_FIELDS))
    console.print(audit if data["audit"] else "audit: no operator action touched it")
