"""``ledgerq purge``: remove finished tasks older than a cutoff, now.

The reconciler applies retention on its own (``LEDGERQ_RETENTION_<STATUS>_DAYS``,
whole days at a time); ``purge`` is for an operator who wants it done now, or
with a different age. It counts what matches first, asks before it removes
anything (unless ``--yes``; with no terminal to ask on it refuses), then drops
the wholly expired day partitions and deletes the rest in batches of
:attr:`RetentionConfig.batch_size <ledgerq.relay.retention.RetentionConfig.batch_size>`,
each its own short transaction, with a progress bar. ``--dry-run`` counts and
changes nothing. Tasks still live are never touched, whatever their age.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from datetime import datetime, timedelta
from typing import Any

import click
from rich.console import Console

from ledgerq.cli.group import EX_USAGE, emit, fail, json_option, pass_settings, progress_bar
from ledgerq.compose import open_ledger, retention_config
from ledgerq.core.config import Settings
from ledgerq.relay.retention import TERMINAL, Retention, RetentionCounts

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or ``1d12h``); ValueError otherwise."""
    cleaned = text.strip().lower()
    parts = _DURATION.findall(cleaned)
    if not cleaned or _DURATION.sub("", cleaned).strip():
        raise ValueError(f"--older-than: cannot read {text!r} as a duration (use 30d, 12h, 90m)")
    seconds = sum(float(n) * _UNITS[unit] for n, unit in parts)
    if not 0 < seconds <= 100 * 365 * 86_400:
        raise ValueError(f"--older-than must be more than 0 and at most 100 years, got {text!r}")
    return timedelta(seconds=seconds)


def _statuses(given: tuple[str, ...]) -> tuple[str, ...]:
    unknown = [s for s in given if s not in TERMINAL]
    if unknown:
        raise ValueError(
            f"--status: {unknown[0]!r} is not a finished status (use {', '.join(TERMINAL)}; "
            "live tasks are never purged)"
        )
    return tuple(dict.fromkeys(given)) or TERMINAL


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


async def _purge(
    settings: Settings,
    older_than: timedelta | None,
    statuses: tuple[str, ...],
    dry_run: bool,
    yes: bool,
    as_json: bool,
) -> dict[str, Any]:
    async with open_ledger(settings, "ledgerq-purge", pool_size=1) as ledger:
        retention = Retention(ledger, retention_config(settings))
        cutoffs = await retention.cutoffs(older_than, statuses)
        matched = await ledger.count_purgeable(cutoffs) if cutoffs else {}
        total = sum(matched.values())
        result: dict[str, Any] = {
            "dry_run": dry_run,
            "cutoffs": {s: c.isoformat() for s, c in cutoffs.items()},
            "matched": matched,
            "total": total,
        }
        if dry_run:
            return result
        _confirm(total, cutoffs, yes)
        started = time.perf_counter()
        with progress_bar(Console(stderr=True), transient=as_json) as progress:
            bar = progress.add_task("purging", total=total)
            counts: RetentionCounts = await retention.purge(
                cutoffs, lambda n: progress.advance(bar, n)
            )
        result.update(counts.as_dict())
        result["elapsed_s"] = round(time.perf_counter() - started, 3)
        return result


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
        age = None if older_than is None else parse_duration(older_than)
        chosen = _statuses(statuses)
    except ValueError as exc:
        fail(str(exc), EX_USAGE)
        return
    data = asyncio.run(_purge(settings, age, chosen, dry_run, yes, as_json))

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
