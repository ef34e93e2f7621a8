"""The benchmark's outputs: a table for a person, a JSON object, a latency plot.

The plot needs matplotlib, which is not a dependency of ledgerq: it comes with
the ``bench`` extra (``pip install 'ledgerq[bench]'``, which also brings numpy
and pillow). :func:`require_plotting` says so in one line, before the benchmark
starts rather than after it has run.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ledgerq.bench.phases import LatencySample
from ledgerq.core.errors import ConfigError


class PlottingUnavailableError(ConfigError):
    """``bench --plot`` was asked for, and matplotlib is not installed."""


def require_plotting() -> None:
    """Raise :class:`PlottingUnavailableError` unless matplotlib can be imported."""
    try:
        importlib.import_module("matplotlib")
    except ImportError as exc:
        raise PlottingUnavailableError(
            "bench --plot needs matplotlib, which is not installed: "
            "pip install 'ledgerq[bench]' (or run bench without --plot)"
        ) from exc


def render(result: dict[str, Any], console: Console) -> None:
    if result["config"].get("direct"):
        render_direct(result, console)
        return
    table = Table(title="ledgerq bench", show_lines=False)
    table.add_column("measure")
    table.add_column("value", justify="right")
    table.add_column("note")
    raw = result["raw_publish_per_s"] or 1.0
    rows = [
        (
            "drain, sync handler writing one row (no option)",
            _rate(result, "drain_sync_db_per_s"),
            _peer(result, "drain_sync_db_per_s"),
        ),
        (
            "drain, async handler writing one row (no option)",
            _rate(result, "drain_async_db_per_s"),
            _peer(result, "drain_async_db_per_s"),
        ),
        ("enqueue, 1 task per transaction", f"{result['enqueue_per_s']:,.0f}/s", ""),
        ("enqueue, batched (1,000 per statement)", f"{result['enqueue_batch_per_s']:,.0f}/s", ""),
        (
            "drain, no-op handler",
            _rate(result, "drain_per_s"),
            _of_raw(result, "drain_per_s", raw),
        ),
        (
            "drain, one row, group_commit=True",
            _rate(result, "drain_db_per_s"),
            _of_raw(result, "drain_db_per_s", raw),
        ),
        *_vs_direct(result),
        (
            "broker window during the no-op drain",
            f"{result.get('drain_window', {}).get('mean', 0):.0%} full",
            f"max {result.get('drain_window', {}).get('max', 0):.0%}; "
            f"{result.get('drain_envelope', 0):.1f} tasks per message",
        ),
        ("worker peak RSS", f"{result['worker_rss_mb']:.0f} MB", "max over workers"),
        ("raw aio-pika publish + confirm", f"{result['raw_publish_per_s']:,.0f}/s", "ceiling"),
        ("raw aio-pika consume + ack", f"{result['raw_consume_per_s']:,.0f}/s", "ceiling"),
        (
            "publish -> consume -> ack, same ledger writes",
            f"{result['pipeline_ceiling_per_s']:,.0f}/s",
            f"no-op drain: {result['drain_per_s'] / (result['pipeline_ceiling_per_s'] or 1):.0%}",
        ),
    ]
    if "latency_ms" in result:
        rows[6:6] = [
            ("commit -> handler start, idle", _ms(result["latency_ms"]), "p50 / p95 / p99"),
            ("commit -> terminal, idle", _ms(result["latency_ms_terminal"]), "p50 / p95 / p99"),
            (
                "commit -> handler start, loaded",
                _ms(result["latency_ms_load"]),
                f"at {result['config']['load_rate']:,.0f} tasks/s",
            ),
        ]
    if "celery_db_per_s" in result:
        rows.insert(
            2,
            (
                "drain, Celery peer writing one row",
                f"{result['celery_db_per_s']:,.0f}/s",
                "RabbitMQ, acks_late, prefork x2",
            ),
        )
    if isinstance(result.get("celery"), str):  # a peer not run (on MySQL / MariaDB)
        rows.append(("Celery peer", "-", result["celery"]))
    if "drain_per_s_with_history" in result:
        rows.append(
            (
                f"drain with {result['config']['history_rows']:,} rows in history",
                f"{result['drain_per_s_with_history']:,.0f}/s",
                f"{result['history_ratio']:.0%} of the empty-ledger drain",
            )
        )
    if "drain_ordered_per_s" in result:
        rows.append(
            (
                f"drain, {result['config']['ordering_keys']:,} ordering keys",
                f"{result['drain_ordered_per_s']:,.0f}/s",
                f"{result['ordered_ratio']:.0%} of the unordered no-op drain",
            )
        )
    if "drain_graph_per_s" in result:
        graph = result["graph"]
        note = (
            f"{graph['groups']} groups of {graph['width'] - 1} + a join; {graph['edges']:,} edges"
        )
        if result.get("graph_ratio") is not None:
            note += (
                f"; {result['graph_ratio']:.0%} of the no-op drain, "
                f"{result['graph_extra_us_per_edge']:,.0f} µs more per edge"
            )
        rows.append(("drain, graph (after=)", f"{result['drain_graph_per_s']:,.0f}/s", note))
    for measure, value, note in rows:
        table.add_row(measure, value, note)
    console.print(table)


def _ran(result: dict[str, Any], key: str) -> bool:
    """Whether the drain of ``key`` ran (``--handler`` picks them; the others read 0)."""
    return key.replace("_per_s", "_runs") in result


def _rate(result: dict[str, Any], key: str) -> str:
    return f"{result[key]:,.0f}/s" if _ran(result, key) else "not run"


def _of_raw(result: dict[str, Any], key: str, raw: float) -> str:
    return f"{result[key] / raw:.0%} of raw publish" if _ran(result, key) else "not in --handler"


def _peer(result: dict[str, Any], key: str) -> str:
    celery = result.get("celery_db_per_s")
    return f"{result[key] / celery:.2f}x Celery" if celery and _ran(result, key) else ""


def _ms(p: dict[str, float]) -> str:
    return f"{p['p50']:.1f} / {p['p95']:.1f} / {p['p99']:.1f} ms"


def plot(idle: list[LatencySample], load: list[LatencySample], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=False)
    for ax, samples, title in (
        (axes[0], idle, "idle (tasks trickling in)"),
        (axes[1], load, "under load"),
    ):
        xs = [s.commit_at for s in samples]
        ax.scatter(xs, [s.to_start_ms for s in samples], s=6, label="commit -> handler start")
        ax.scatter(
            xs, [s.to_finish_ms for s in samples], s=6, alpha=0.6, label="commit -> terminal status"
        )
        ax.set_title(title)
        ax.set_xlabel("seconds since the phase began (commit time)")
        ax.set_ylabel("latency (ms)")
        ax.set_yscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper right")
    fig.suptitle("ledgerq: latency from commit, per task")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def render_direct(result: dict[str, Any], console: Console) -> None:
    """``bench --direct``: the direct drain, and pgqueuer's beside it."""
    table = Table(title="ledgerq bench --direct", show_lines=False)
    for column in ("measure", "value", "note"):
        table.add_column(column, justify="right" if column == "value" else "left")
    table.add_row(
        "drain, no-op handler, worker --direct",
        f"{result['direct_drain_per_s']:,.0f}/s",
        f"{result['direct_drain_cpu_ms_per_task']:.3f} ms worker CPU per task",
    )
    if "direct_latency_ms" in result:
        table.add_row(
            "commit -> handler start, idle",
            _ms(result["direct_latency_ms"]),
            f"p50 / p95 / p99 at {result['config']['idle_rate']:,.0f} tasks/s",
        )
        table.add_row(
            "commit -> terminal, idle", _ms(result["direct_latency_ms_terminal"]), "p50 / p95 / p99"
        )
    if "pgqueuer_per_s" in result:
        table.add_row(
            "drain, no-op, pgqueuer peer", f"{result['pgqueuer_per_s']:,.0f}/s", "batch 10"
        )
        table.add_row("direct / pgqueuer", f"{result.get('direct_vs_pgqueuer', 0):.2f}", "")
    else:
        table.add_row("pgqueuer peer", "-", str(result.get("pgqueuer", "")))
    table.add_row("worker peak RSS", f"{result['worker_rss_mb']:.0f} MB", "max over workers")
    console.print(table)


def _vs_direct(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    """The direct path's no-op drain of the same run, and the broker path's ratio to it."""
    if "direct_drain_per_s" not in result:
        return []
    return [
        (
            "drain, no-op handler, worker --direct (same run)",
            f"{result['direct_drain_per_s']:,.0f}/s",
            f"broker path / direct path: {result.get('drain_vs_direct', 0):.2f}",
        )
    ]
