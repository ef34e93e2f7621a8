"""``ledgerq purge``: remove finished tasks older than a cutoff, now.

The reconciler applies retention on its own (``LEDGERQ_RETENTION_<STATUS>_DAYS``,
whole days at a time); ``purge`` is for an operator who wants it done now, or
with a different age. It counts what matches first, asks before it removes
anything (unless ``--yes``; with no terminal to ask on it refuses), then drops
the wholly expired day partitions and deletes the rest in batches of
:attr:`RetentionConfig.batch_size <ledgerq.relay.retention.RetentionConfig.batch_size>`,
each its own short transaction, with a progress bar. ``--dry-run`` counts and
changes nothing. Tasks still live are never touched, whatever their age. The
work itself is :func:`ledgerq.admin.purge`.
"""

from __future__ import annotations

import sys
from datetime import datetime, timedelta

import click
from rich.console import Console

from ledgerq import admin
from ledgerq.admin.maintenance import finished_statuses, parse_duration
from ledgerq.cli.group import EX_USAGE, emit, fail, json_option, pass_settings, progress_bar
from ledgerq.core.config import Settings
from ledgerq.core.errors import InvalidFilterError


def _confirm(total: int, cutoffs: dict[str, datetime], yes: bool) -> None:
    if yes or total == 0:
        return
    if not sys.stdin.isatty():
        fail(
            f"purge would remove {total} finished tasks; refusing without a terminal to "
            "confirm on: pass --yes (or --dry-run to count only)",
            EX_USAGE,
        )
    ages = ", ".join(f"{s} before {c:%Y-%m-%d %H:%M:%S %Z}" for s, c in cutoffs.items())
    click.confirm(f"Remove {total} finished tasks ({ages})?", abort=True, err=True)


def _purge(
    settings: Settings,
    older_than: timedelta | None,
    statuses: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> admin.PurgeResult:
    counted = admin.purge(settings, older_than, statuses, dry_run=True)
    if dry_run:
        return counted
    _confirm(counted.total, dict(counted.cutoffs), yes)
    with progress_bar(Console(stderr=True), transient=as_json) as progress:
        bar = progress.add_task("purging", total=counted.total)
        return admin.purge(
            settings, older_than, statuses, progress=lambda n: progress.advance(bar, n)
        )


@click.command()
@click.option(
    "--older-than",
    metavar="DURATION",
    default=None,
    help="Finished more than this long ago (30d, 12h, 90m, 2w; "
    "default: each status's retention, LEDGERQ_RETENTION_<STATUS>_DAYS).",
)
@click.option(
    "--status",
    "statuses",
    multiple=True,
    metavar="STATUS",
    help="succeeded, dead or cancelled (repeatable; default: all three).",
)
@click.option("--dry-run", is_flag=True, help="Count what would be removed; change nothing.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@json_option
@pass_settings
def purge(
    settings: Settings,
    older_than: str | None,
    statuses: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> None:
    """Remove finished tasks older than their retention (or --older-than), in batches."""
    try:
        age = None if older_than is None else parse_duration(older_than, "--older-than")
        chosen = finished_statuses(statuses, "--status")
    except InvalidFilterError as exc:
        fail(str(exc), EX_USAGE)
        return
    data = _purge(settings, age, chosen, dry_run, yes, as_json).to_json()

    def render(_: Console) -> None:
        by = ", ".join(f"{s} {n}" for s, n in data["matched"].items()) or "no status"
        if dry_run:
            click.echo(f"dry run: would remove {data['total']} finished tasks ({by})")
            return
        click.echo(
            f"removed {data['removed']} finished tasks ({by}): {data['dropped']} day "
            f"partitions dropped holding {data['dropped_rows']}, {data['deleted_rows']} "
            f"deleted in batches, in {data['elapsed_s']:.2f} s"
        )

    emit(data, as_json, render)
