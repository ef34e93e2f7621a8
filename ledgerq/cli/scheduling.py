"""``ledgerq queues`` and ``ledgerq kinds``: pause and resume work, and rate limits.

``queues pause Q`` / ``kinds pause K`` keep the queue's (or kind's) tasks in the
ledger: the relay publishes none of them, and the tasks already published but
not yet claimed are taken back (their messages are skipped as stale). Running
tasks run on. The pause is a row in the ledger, so it survives restarts, and
each pause and resume is an audit record (``ledgerq tasks audit``). ``resume``
lifts it; the next relay batch publishes. ``kinds limit K 20/s`` sets a kind's
rate limit (as ``@task(rate_limit=...)`` does from a worker); ``--clear``
lifts it. The work itself is the admin API (:mod:`ledgerq.admin.scheduling`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ledgerq import admin
from ledgerq.cli.group import EX_USAGE, emit, fail, json_option, pass_settings
from ledgerq.core.config import Settings
from ledgerq.core.errors import InvalidTaskError
from ledgerq.ledger.scheduling import PauseReport, RateLimit, Scope


def _report_line(report: PauseReport) -> str:
    done = "paused" if report.action == "pause" else "resumed"
    if not report.changed:
        state = "already paused" if report.action == "pause" else "not paused"
        return f"{report.scope} {report.name!r}: {state}; nothing changed"
    line = f"{report.scope} {report.name!r}: {done} (audit record {report.audit_id})"
    if report.unpublished:
        line += f"; {report.unpublished} published tasks taken back into the ledger"
    return line


def _toggle(scope: Scope, action: str) -> click.Command:
    @click.command(action)
    @click.argument("name")
    @click.option("--reason", default=None, help="Why (kept with the pause and in the audit).")
    @click.option("--actor", default=None, help="Who acts (default: the OS user).")
    @json_option
    @pass_settings
    def command(
        settings: Settings, name: str, reason: str | None, actor: str | None, as_json: bool
    ) -> None:
        try:
            if action == "pause":
                report = admin.pause(settings, scope, name, actor=actor, reason=reason)
            else:
                report = admin.resume(settings, scope, name, actor=actor)
        except InvalidTaskError as exc:
            fail(str(exc), EX_USAGE)
        emit(report.to_json(), as_json, lambda console: click.echo(_report_line(report)))

    command.help = (
        f"Stop publishing the {scope}'s tasks; they wait in the ledger (audited)."
        if action == "pause"
        else f"Publish the {scope}'s tasks again (audited)."
    )
    return command


def _pauses_table(rows: list[dict[str, Any]], scope: Scope) -> Callable[[Console], None]:
    def render(console: Console) -> None:
        mine = [r for r in rows if r["scope"] == scope]
        if not mine:
            console.print(f"no {scope} is paused")
            return
        table = Table(title=f"paused {scope}s", box=box.SIMPLE_HEAD)
        for column in (scope, "since (UTC)", "by", "reason"):
            table.add_column(column)
        for r in mine:
            table.add_row(
                Text(r["name"]), str(r["paused_at"])[:19], Text(r["actor"]), Text(r["reason"] or "")
            )
        console.print(table)

    return render


@click.group()
def queues() -> None:
    """Pause and resume queues (the relay publishes nothing of a paused queue)."""


@queues.command("list")
@json_option
@pass_settings
def queues_list(settings: Settings, as_json: bool) -> None:
    """The paused queues."""
    rows = [pause.to_json() for pause in admin.pauses(settings, "queue")]
    emit(rows, as_json, _pauses_table(rows, "queue"))


@click.group()
def kinds() -> None:
    """Pause, resume and rate-limit kinds."""


@kinds.command("list")
@json_option
@pass_settings
def kinds_list(settings: Settings, as_json: bool) -> None:
    """Kinds with a rate limit, a pause or ordering "block", and how many of their
    tasks are pending."""
    rows = [kind.to_json() for kind in admin.kinds(settings)]

    def render(console: Console) -> None:
        if not rows:
            console.print("no kind is limited or paused")
            return
        table = Table(box=box.SIMPLE_HEAD)
        for column in ("kind", "rate limit", "paused", "a dead task", "pending"):
            table.add_column(column)
        for r in rows:
            limit = "" if r["rate_per_s"] is None else str(RateLimit(r["rate_per_s"], r["burst"]))
            paused, dead = "yes" if r["paused"] else "", f"{r['ordering']}s its key"
            table.add_row(Text(r["kind"]), limit, paused, dead, str(r["pending"]))
        console.print(table)

    emit(rows, as_json, render)


@kinds.command("limit")
@click.argument("kind")
@click.argument("rate", required=False)
@click.option("--burst", type=float, default=None, help="Bucket size (default: 1 s of rate).")
@click.option("--clear", is_flag=True, help="Lift the kind's rate limit.")
@click.option("--actor", default=None, help="Who acts (default: the OS user).")
@json_option
@pass_settings
def kinds_limit(
    settings: Settings,
    kind: str,
    rate: str | None,
    burst: float | None,
    clear: bool,
    actor: str | None,
    as_json: bool,
) -> None:
    """Set KIND's rate limit, e.g. 20/s, 100/m, 10/h, across every relay (audited).
    A worker whose @task sets rate_limit writes its own at start."""
    if clear == (rate is not None):
        fail("give a RATE such as 20/s, or --clear", EX_USAGE)
    try:
        limit = None if clear else RateLimit.parse(rate, burst)
    except InvalidTaskError as exc:
        fail(str(exc), EX_USAGE)
    try:
        change = admin.set_rate_limit(settings, kind, limit, actor=actor)
    except InvalidTaskError as exc:
        fail(str(exc), EX_USAGE)
    shown = "none" if limit is None else str(limit)
    emit(
        change.to_json(), as_json, lambda console: click.echo(f"kind {kind!r}: rate limit {shown}")
    )


for _scope, _group in (("queue", queues), ("kind", kinds)):
    for _action in ("pause", "resume"):
        _group.add_command(_toggle(_scope, _action))  # type: ignore[arg-type]
