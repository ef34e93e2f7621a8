"""``ledgerq demo``: the whole pipeline on this machine, with a progress bar.

It starts a relay and workers as child processes, then plays a shop: each order
is one business transaction that inserts the order row and enqueues its tasks
(a receipt written through the handler's transaction, a flaky task that fails
once, a no-op). One order in ten rolls back, so its tasks must never run. At the
end it prints what the ledger says, and checks it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from ledgerq import enqueue
from ledgerq.cli.group import pass_settings, progress_bar
from ledgerq.compose.storage import async_engine, own_ledger_on, sync_engine, upgrade
from ledgerq.core.config import Settings
from ledgerq.demo import place_order, prepare_shop, shop_queries
from ledgerq.processes import Services


@dataclass
class Plan:
    committed_tasks: int = 0
    receipts: int = 0
    rolled_back_orders: int = 0


def _place_orders(
    engine: Engine, orders: int, rng: random.Random, progress: Progress, bar: Any
) -> Plan:
    plan = Plan()
    for n in range(orders):
        with Session(engine) as session, session.begin():
            order_id = place_order(session, f"customer-{n}")
            enqueue(session, "demo.receipt", {"order": order_id}, business_key=f"order-{order_id}")
            enqueue(session, "demo.noop", {"order": order_id})
            kinds = 2
            if n % 20 == 0:
                enqueue(session, "demo.flaky", {"order": order_id}, retry=[0.2])
                kinds += 1
            if rng.random() < 0.1:
                session.rollback()  # the business transaction fails: no task may run
                plan.rolled_back_orders += 1
                continue
        plan.committed_tasks += kinds
        plan.receipts += 1
        progress.update(bar, total=plan.committed_tasks)
    return plan


def _summary(stats: dict[str, Any], engine: Engine, plan: Plan, elapsed: float) -> dict[str, Any]:
    with engine.connect() as conn:
        rows, distinct = conn.execute(shop_queries(conn).count_receipts).one()
    return {
        "tasks_committed": plan.committed_tasks,
        "orders_rolled_back": plan.rolled_back_orders,
        "by_status": stats["by_status"],
        "by_kind": stats["by_kind"],
        "receipts_written": int(rows),
        "receipt_duplicates": int(rows) - int(distinct),
        "receipts_expected": plan.receipts,
        "seconds": round(elapsed, 2),
        "tasks_per_second": round(plan.committed_tasks / elapsed, 1) if elapsed else None,
        "ok": stats["by_status"] == {"succeeded": plan.committed_tasks}
        and int(rows) == plan.receipts == int(distinct),
    }


def _print_summary(summary: dict[str, Any], console: Console) -> None:
    table = Table(title="ledgerq demo: what the ledger says")
    table.add_column("kind")
    table.add_column("succeeded", justify="right")
    table.add_column("other", justify="right")
    for kind, counts in sorted(summary["by_kind"].items()):
        other = {k: v for k, v in counts.items() if k != "succeeded"}
        table.add_row(kind, str(counts.get("succeeded", 0)), json.dumps(other) if other else "-")
    console.print(table)
    console.print(
        f"{summary['tasks_committed']} tasks committed in {summary['seconds']} s "
        f"({summary['tasks_per_second']}/s end to end); "
        f"{summary['orders_rolled_back']} orders rolled back, none of their tasks ran; "
        f"{summary['receipts_written']} receipts written for {summary['receipts_expected']} "
        f"committed orders, {summary['receipt_duplicates']} duplicates."
    )
    verdict = "[green]OK[/green]" if summary["ok"] else "[red]MISMATCH[/red]"
    console.print(f"every committed task reached exactly one terminal status: {verdict}")


@click.command("demo")
@click.option("--orders", default=1500, show_default=True, help="Business transactions to run.")
@click.option("--workers", default=2, show_default=True, help="Worker processes.")
@click.option("--seed", default=7, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--logs", default="demo-logs", show_default=True, type=click.Path())
@pass_settings
def demo(
    settings: Settings, orders: int, workers: int, seed: int, as_json: bool, logs: str
) -> None:
    """Run the pipeline end to end on this machine and print what the ledger says."""
    upgrade(settings)
    engine = sync_engine(settings, "ledgerq-demo", pool_size=2)
    prepare_shop(engine, reset=True)
    console = Console(stderr=as_json)
    # The shop is a synchronous application (its orders go through a Session); the
    # ledger's questions are async, asked on this one loop.
    with asyncio.Runner() as loop:
        ledger = own_ledger_on(async_engine(settings, "ledgerq-demo", pool_size=1))
        loop.run(ledger.truncate())
        services = Services(settings, Path(logs))
        services.start("relay", ["relay"])
        for i in range(workers):
            services.start(f"worker-{i}", ["worker", "--app", "ledgerq.demo.app"])
        started = time.perf_counter()
        try:
            with progress_bar(console) as progress:
                bar = progress.add_task("tasks finished", total=0)
                plan = _place_orders(engine, orders, random.Random(seed), progress, bar)
                done = 0
                while done < plan.committed_tasks:
                    if services.dead():
                        raise click.ClickException(f"a service exited early; see {logs}/")
                    done = loop.run(ledger.count_finished())
                    progress.update(bar, completed=done)
                    time.sleep(0.2)
            elapsed = time.perf_counter() - started
        finally:
            codes = services.stop()
        summary = _summary(loop.run(ledger.stats()), engine, plan, elapsed)
        loop.run(ledger.dispose())
    summary["service_exit_codes"] = codes
    engine.dispose()
    if as_json:
        click.echo(json.dumps(summary, indent=2, sort_keys=True))
    else:
        _print_summary(summary, console)
    if not summary["ok"]:
        raise click.exceptions.Exit(1)
