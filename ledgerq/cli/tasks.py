"""``ledgerq tasks``: find tasks and act on them, every action audited.

``list`` shows live and finished tasks together, newest first, filtered;
``cancel``, ``retry``, ``reschedule``, ``set-attempts`` and ``set-priority``
take task ids or the same filters. An action first counts what it matches (a
dry run); more than one task needs ``--yes`` or a yes at the terminal (with no
terminal and no ``--yes`` it refuses, exit 64); then it runs in batches of 500,
each its own transaction, with a progress bar. ``release-key KEY`` lets an
ordering key move on past the dead tasks that hold it (after a yes, or
``--yes``). ``audit`` lists what was done. The work itself is the admin
API (:mod:`ledgerq.admin`: ``act``, ``list_tasks``, ``release_key``, ``audit``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerq import admin
from ledgerq.admin.targets import os_user
from ledgerq.cli.group import EX_USAGE, emit, fail, json_option, pass_settings, progress_bar
from ledgerq.core.config import Settings
from ledgerq.ledger.actions import Action, Report, attempts_text, progress_text, status_text
from ledgerq.ledger.filters import DEFAULT_LIMIT, STATUSES, TaskFilter, parse_time

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

_FILTERS: list[Decorator] = [
    click.option("--status", "statuses", multiple=True, metavar="STATUS",
                 help=f"Tasks in this status (repeatable): {', '.join(STATUSES)}."),
    click.option("--kind", default=None, help="Tasks of this kind."),
    click.option("--queue", default=None, help="Tasks on this queue."),
    click.option("--key", "business_key", default=None, help="Tasks with this business key."),
    click.option("--since", default=None, metavar="TIME",
                 help="Created at or after TIME: ISO 8601, or 30m, 2h, 7d ago."),
    click.option("--until", default=None, metavar="TIME", help="Created before TIME."),
    click.option("--error", default=None, metavar="TEXT",
                 help="Last error contains TEXT (case-insensitive)."),
    click.option("--tag", "tags", multiple=True, metavar="TAG",
                 help="Tasks carrying TAG (repeatable: every one must match)."),
    click.option("--before", default=None, type=int, metavar="ID",
                 help="Only ids below ID (the next page: the last id shown)."),
]  # fmt: skip


def filter_options(limit_help: str) -> Decorator:
    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        fn = click.option("--limit", default=None, type=int, help=limit_help)(fn)
        for option in reversed(_FILTERS):
            fn = option(fn)
        return fn

    return apply


def _selection(ids: tuple[int, ...] = (), **criteria: Any) -> TaskFilter:
    return TaskFilter.parse(ids=ids, **criteria)


@click.group()
def tasks() -> None:
    """Find tasks, and cancel, retry, reschedule or change them (audited)."""


def _short(value: Any, width: int = 60) -> str:
    """The last line of a (multi-line) value, cut to ``width``."""
    lines = str(value or "").strip().splitlines()
    text = lines[-1] if lines else ""
    return text if len(text) <= width else text[: width - 1] + "…"


def _when(value: str | None) -> str:
    """An ISO time as ``MM-DD HH:MM:SS`` (UTC, as the database returns it)."""
    return "" if not value else value[5:10] + " " + value[11:19]


@tasks.command("list")
@filter_options(f"At most N tasks (default {DEFAULT_LIMIT}).")
@json_option
@pass_settings
def list_command(settings: Settings, /, as_json: bool, **criteria: Any) -> None:
    """Live and finished tasks, newest first; filters combine."""
    selection = _selection(**criteria)

    rows = [row.to_json() for row in admin.list_tasks(settings, selection)]

    def render(console: Console) -> None:
        if not rows:
            console.print("no tasks match")
            return
        table = Table(title=f"{len(rows)} tasks, newest first", box=box.SIMPLE_HEAD)
        widest_id = max(2, *(len(str(r["id"])) for r in rows))
        for name, width in (("id", widest_id), ("status", 9), ("kind", 8), ("queue", 5)):
            table.add_column(name, no_wrap=True, min_width=width)
        for name, width in (("tries", 5), ("run_at (UTC)", 14), ("key", 3), ("progress", 8)):
            table.add_column(name, no_wrap=True, min_width=width)
        tagged = any(r["tags"] for r in rows)  # the column only when some task has tags
        if tagged:
            table.add_column("tags", overflow="ellipsis", no_wrap=True, max_width=30)
        table.add_column("last error", overflow="ellipsis", no_wrap=True, ratio=1)
        for r in rows:
            tags = [Text(",".join(r["tags"] or ()))] if tagged else []
            table.add_row(
                str(r["id"]), status_text(r), Text(r["kind"]), Text(r["queue"]),
                attempts_text(r), _when(r["run_at"]),
                Text(r["business_key"] or ""), Text(progress_text(r["progress"])),
                *tags, Text(_short(r["last_error"], 40)),
            )  # fmt: skip
        console.print(table)
        if len(rows) == (selection.limit or DEFAULT_LIMIT):
            console.print(f"next page: --before {rows[-1]['id']}")

    emit(rows, as_json, render)


def _report_lines(report: Report) -> list[str]:
    verb = "would change" if report.dry_run else "changed"
    head = f"{report.action}: matched {report.matched}, {verb} {report.changed}, "
    lines = [head + f"skipped {report.skipped}" + (" (dry run)" if report.dry_run else "")]
    if report.asked_to_stop:
        lines.append(
            f"  {report.asked_to_stop} running: asked to stop (ctx.cancel_requested); "
            "they end cancelled when their handler returns"
        )
    if report.cascaded:
        lines.append(f"  {report.cascaded} live descendants cancelled with them (--cascade)")
    lines += [f"  skipped {n}: {why}" for why, n in sorted(report.reasons.items())]
    if report.audit_id is not None:
        lines.append(f"  audit record {report.audit_id}")
    return lines


def _confirm(action: Action, matched: int, yes: bool) -> None:
    if matched <= 1 or yes:
        return
    if not sys.stdin.isatty():
        fail(
            f"{action.name} matches {matched} tasks; refusing without --yes "
            "(no terminal to confirm on)",
            EX_USAGE,
        )
    click.confirm(f"{action.name} {matched} tasks?", abort=True)


def _act(settings: Settings, action: Action, options: dict[str, Any]) -> None:
    ids = options.pop("ids")
    actor, reason = options.pop("actor") or os_user(), options.pop("reason")
    dry_run, yes, as_json = options.pop("dry_run"), options.pop("yes"), options.pop("as_json")
    selection = _selection(ids=tuple(ids), **options)

    def run() -> Report:
        counted = admin.act(settings, action, selection, actor=actor, dry_run=True)
        if dry_run:
            return counted
        _confirm(action, counted.matched, yes)
        console = Console(stderr=True)
        if as_json or counted.matched <= 1 or not console.is_terminal:
            return admin.act(settings, action, selection, actor=actor, reason=reason)
        with progress_bar(console, transient=True) as bar:
            job = bar.add_task(action.name, total=counted.matched)

            def advance(report: Report) -> None:
                bar.update(job, completed=report.matched)

            return admin.act(
                settings, action, selection, actor=actor, reason=reason, progress=advance
            )

    report = run()
    emit(report.to_json(), as_json, lambda console: click.echo("\n".join(_report_lines(report))))


def action_command(name: str, help_text: str) -> Decorator:
    """A ``tasks`` sub-command taking ids or filters and the common action options."""

    def apply(fn: Callable[..., Any]) -> Callable[..., Any]:
        for option in (
            pass_settings,
            json_option,
            click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
            click.option("--dry-run", is_flag=True, help="Change nothing; print the counts."),
            click.option("--reason", default=None, help="Why (kept in the audit record)."),
            click.option("--actor", default=None, help="Who acts (default: the OS user)."),
            filter_options("At most N tasks (default: every match)."),
            click.argument("ids", nargs=-1, type=int),
        ):
            fn = option(fn)
        return tasks.command(name, help=help_text)(fn)

    return apply


@action_command("cancel", "Cancel tasks: a waiting one never runs; a running one is asked to stop.")
@click.option(
    "--cascade", is_flag=True, help="Cancel their live descendants (ctx.spawn, parent_id) too."
)
def cancel(settings: Settings, cascade: bool, **options: Any) -> None:
    _act(settings, Action.cancel(cascade=cascade), options)


@action_command("retry", "Run dead or cancelled tasks again (same id, fresh attempts); "
                "a pending task scheduled later runs now.")  # fmt: skip
def retry(settings: Settings, **options: Any) -> None:
    _act(settings, Action.retry(), options)


@action_command("reschedule", "Change when pending tasks run (--at TIME or --in 10m).")
@click.option("--at", "at_time", default=None, metavar="TIME", help="ISO 8601 time to run at.")
@click.option("--in", "in_time", default=None, metavar="DURATION", help="Run this long from now.")
def reschedule(
    settings: Settings, at_time: str | None, in_time: str | None, **options: Any
) -> None:
    if (at_time is None) == (in_time is None):
        raise click.UsageError("give exactly one of --at TIME or --in DURATION")
    when = (
        parse_time(at_time, "--at")
        if at_time is not None
        else parse_time(in_time or "", "--in", ago=False)
    )
    _act(settings, Action.reschedule(when), options)


@action_command("set-attempts", "Change live tasks' attempt limit (--to N).")
@click.option("--to", "max_attempts", required=True, type=int, metavar="N")
def set_attempts(settings: Settings, max_attempts: int, **options: Any) -> None:
    _act(settings, Action.set_attempts(max_attempts), options)


@action_command("set-priority", "Change live tasks' priority (--to P).")
@click.option("--to", "priority", required=True, type=int, metavar="P")
def set_priority(settings: Settings, priority: int, **options: Any) -> None:
    _act(settings, Action.set_priority(priority), options)


@tasks.command("release-key")
@click.argument("key")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--dry-run", is_flag=True, help="Change nothing; print what holds the key.")
@click.option("--reason", default=None, help="Why (kept in the audit record).")
@click.option("--actor", default=None, help="Who acts (default: the OS user).")
@json_option
@pass_settings
def release_key(
    settings: Settings,
    key: str,
    yes: bool,
    dry_run: bool,
    reason: str | None,
    actor: str | None,
    as_json: bool,
) -> None:
    """Let ordering KEY move on past its dead tasks of an ordering="block" kind: they
    stay dead and stop holding the key, so its next task runs (audited). To run a
    dead task again instead, use `tasks retry ID`."""
    who = actor or os_user()

    counted = admin.release_key(settings, key, actor=who, dry_run=True)
    report = counted
    if not dry_run and counted.held:
        if not yes:
            question = (
                f"release ordering key {counted.key!r} from {len(counted.released)} dead "
                f"tasks (ids {', '.join(map(str, counted.released))}); "
                f"{counted.waiting} pending behind it may run?"
            )
            if not sys.stdin.isatty():
                fail(
                    f"release-key {counted.key!r} is held by {len(counted.released)} dead "
                    "tasks; refusing without --yes (no terminal to confirm on)",
                    EX_USAGE,
                )
            click.confirm(question, abort=True)
        report = admin.release_key(settings, key, actor=who, reason=reason)
    emit(report.to_json(), as_json, lambda console: click.echo(report.line()))


@tasks.command("audit")
@click.option("--limit", default=DEFAULT_LIMIT, type=click.IntRange(1, 100_000))
@click.option("--before", default=None, type=int, metavar="ID", help="Records below ID.")
@json_option
@pass_settings
def audit(settings: Settings, limit: int, before: int | None, as_json: bool) -> None:
    """Operator actions, newest first: who, when, what, on which tasks, and the counts."""

    rows = [record.to_json() for record in admin.audit(settings, limit, before)]

    def render(console: Console) -> None:
        table = Table(title=f"{len(rows)} audit records, newest first", box=box.SIMPLE_HEAD)
        for name in ("id", "at", "actor", "action"):
            table.add_column(name, no_wrap=True)
        for name in ("selection", "reason"):
            table.add_column(name, overflow="fold", min_width=14)
        table.add_column("m/c/s", no_wrap=True)
        for r in rows:
            table.add_row(
                str(r["id"]), _when(r["at"]), Text(r["actor"]), r["action"],
                Text(_selection_text(r["selection"], r["options"])), Text(r["reason"] or ""),
                f"{r['matched']}/{r['changed']}/{r['skipped']}",
            )  # fmt: skip
        console.print(table)

    emit(rows, as_json, render)


def _selection_text(selection: dict[str, Any], options: dict[str, Any]) -> str:
    """``statuses=dead,cancelled kind=x`` (lists joined by commas)."""
    parts = []
    for key, value in {**selection, **options}.items():
        shown = ",".join(map(str, value)) if isinstance(value, list) else str(value)
        parts.append(f"{key}={shown}")
    return " ".join(parts)
