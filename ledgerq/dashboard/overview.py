"""The overview page: what is waiting and running now, and how the last window went.

Current state (per queue and kind: pending, due backlog and its oldest task's
age, published, running; the workers; the due tasks no live worker serves and
each live broker route's window, through ``unserved()`` and ``windows()``) is
read from the hot table, which holds live tasks only, and the workers'
subscriptions. Everything over time -- throughput and success rate per bin,
latency percentiles per kind and hop, dead tasks by error -- is read from the
rollup (``ledgerq/relay/rollup.py``) plus history's few rows since its mark, so
the page costs the same on a history of ten million rows
(docs/performance.md). Latency percentiles are bucket bounds: at most 41 % over
the true value (:mod:`ledgerq.ledger.rollup`). The MySQL / MariaDB ledger has the
same rollup (:mod:`ledgerq.ledger.mysql.rollup`); a ledger without one has its
figures read from history alone, and the page says so.

The chart data goes into the page as JSON in a ``<script type="application/json">``
block (escaped by Jinja2's ``tojson``), read by ``static/overview.js``: no inline
script, so the Content-Security-Policy can forbid them.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ledgerq.dashboard.pages import render
from ledgerq.ledger.protocol import DashboardLedger, RollupLedger
from ledgerq.ledger.rollup import (
    DEFAULT_WINDOW,
    HOP_TITLES,
    HOPS,
    PERCENTILES,
    WINDOWS,
    Window,
    percentile,
)

STATUSES = ("succeeded", "dead", "cancelled")


def series(rows: list[dict[str, Any]], since: datetime, window: Window) -> dict[str, list[Any]]:
    """Per-bin counts by status, and the success rate (succeeded / (succeeded + dead)),
    on every bin of the window (empty bins are zeros)."""
    step = window.step
    bins = int(window.span / step)
    xs = [since + step * i for i in range(bins)]
    index = {x: i for i, x in enumerate(xs)}
    counts = {s: [0] * bins for s in STATUSES}
    for row in rows:
        at = datetime.fromisoformat(row["at"])
        i = index.get(at)
        if i is not None and row["status"] in counts:
            counts[row["status"]][i] += int(row["n"])
    rate: list[float | None] = []
    for ok, dead in zip(counts["succeeded"], counts["dead"], strict=True):
        rate.append(None if ok + dead == 0 else round(100 * ok / (ok + dead), 2))
    return {"x": [int(x.timestamp()) for x in xs], **counts, "rate": rate}


def latencies(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per kind and hop: how many tasks, and p50/p95/p99 (seconds) from the buckets."""
    histograms: dict[tuple[str, str], dict[int, int]] = {}
    for row in rows:
        histograms.setdefault((row["kind"], row["hop"]), {})[int(row["bucket"])] = int(row["n"])
    out = []
    for kind in sorted({k for k, _ in histograms}):
        hops = []
        for hop in HOPS:
            counts = histograms.get((kind, hop), {})
            hops.append(
                {
                    "hop": hop,
                    "title": HOP_TITLES[hop],
                    "n": sum(counts.values()),
                    "p": [percentile(counts, p) for p in PERCENTILES],
                }
            )
        out.append({"kind": kind, "hops": hops})
    return out


def waiting_for_workers(rows: list[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The unserved rows (``ledger.unserved()``) for the page: ``oldest`` as ISO
    text, and ``waiting_s``, how long the oldest has been due."""
    return [
        {
            **row,
            "oldest": row["oldest"].isoformat(),
            "waiting_s": max(0.0, (now - row["oldest"]).total_seconds()),
        }
        for row in rows
    ]


def _window(request: Request) -> Window:
    return WINDOWS.get(request.query_params.get("window", ""), WINDOWS[DEFAULT_WINDOW])


def serving(subscriptions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The live workers with what each serves: queue, kinds and shards (None: every
    one); ``auto``: a ``--shards auto`` worker, whose shards are its pool's split."""
    return [
        {
            "worker": row["worker"],
            "queue": row["queue"],
            "kinds": sorted(row["kinds"]) if row["kinds"] is not None else None,
            "shards": sorted(row["shards"]) if row["shards"] is not None else None,
            "auto": "+auto." in row["worker"],
            "since": row["started_at"].isoformat(),
        }
        for row in subscriptions
        if row["live"]
    ]


async def overview_data(
    ledger: DashboardLedger, window: Window, now: datetime | None = None
) -> dict[str, Any]:
    """Everything the overview shows, read concurrently."""
    now = now or datetime.now(UTC)
    # Bins aligned to the step, so a point does not move as time passes.
    step_s = int(window.step.total_seconds())
    end = datetime.fromtimestamp((int(now.timestamp()) // step_s + 1) * step_s, UTC)
    since = end - window.span
    upto = await ledger.rolled_upto()
    (
        live,
        throughput,
        latency,
        errors,
        workers,
        unserved,
        routes,
        subscriptions,
    ) = await asyncio.gather(
        ledger.live_counts(),
        ledger.throughput(since, step_s, upto, window.grain),
        ledger.latency(since, upto, window.grain),
        ledger.dead_errors(since, upto, window.grain),
        ledger.workers(),
        ledger.unserved(),
        ledger.windows(),
        ledger.subscriptions(),
    )
    totals = {
        k: sum(int(r[k]) for r in live)
        for k in ("pending", "due", "published", "running", "waiting")
    }
    points = series(throughput, since, window)
    finished = {s: sum(points[s]) for s in STATUSES}
    ended = finished["succeeded"] + finished["dead"]
    lag = None if upto is None else max(0.0, (now - upto).total_seconds())
    return {
        "window": window.name,
        "live": live,
        "totals": totals,
        "finished": finished,
        "success_rate": None if ended == 0 else 100 * finished["succeeded"] / ended,
        "series": points,
        "latency": latencies(latency),
        "errors": errors,
        "workers": workers,
        "serving": serving(subscriptions),
        "unserved": waiting_for_workers(unserved, now),
        "broker_windows": [
            {k: row[k] for k in ("queue", "route", "capacity", "published", "room")}
            for row in routes
        ],
        "rollup_lag_s": lag,
        # A ledger without a rollup reads its figures from history.
        "rollup": isinstance(ledger, RollupLedger),
        "now": now.isoformat(),
        "step": f"{step_s // 60} min" if step_s < 3600 else f"{step_s // 3600} h",
        "stale_after": timedelta(minutes=5).total_seconds(),
    }


async def page(request: Request) -> Response:
    data = await overview_data(request.app.state.ledger, _window(request))
    return render(
        request, "overview.html", data=data, windows=list(WINDOWS), percentiles=PERCENTILES
    )
