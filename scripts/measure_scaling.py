"""The no-op drain against the number of worker and relay processes, on this machine.

Usage: python scripts/measure_scaling.py [--tasks 10000] [--out docs/img/scaling.png]

Runs ``ledgerq bench --handler noop --no-latency`` for each (workers, relays) of a
small grid, one after another in one sitting, and plots the drain rate. The bench
prints the workers' CPU per task too, which says where the time goes.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

GRID = [(w, r) for r in (1, 2) for w in (1, 2, 3)]


def bench(tasks: int, workers: int, relays: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ledgerq", "bench", "--handler", "noop", "--no-latency",
         "--tasks", str(tasks), "--workers", str(workers), "--relays", str(relays), "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    data: dict[str, Any] = json.loads(done.stdout)
    return data


def plot(rows: list[dict[str, Any]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.6), dpi=120)
    for relays in sorted({r["relays"] for r in rows}):
        line = [r for r in rows if r["relays"] == relays]
        ax.plot([r["workers"] for r in line], [r["drain_per_s"] for r in line], marker="o",
                label=f"{relays} relay{'s' if relays > 1 else ''}")  # fmt: skip
    ax.set_xlabel("worker processes")
    ax.set_ylabel("no-op drain (tasks/s)")
    ax.set_xticks(sorted({r["workers"] for r in rows}))
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("ledgerq on 2 cores: drain rate by processes")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--out", type=Path, default=Path("docs/img/scaling.png"))
    args = parser.parse_args()
    rows = []
    for workers, relays in GRID:
        data = bench(args.tasks, workers, relays)
        row = {
            "workers": workers,
            "relays": relays,
            "drain_per_s": data["drain_per_s"],
            "worker_cpu_ms_per_task": data.get("drain_cpu_ms_per_task"),
        }
        print(json.dumps(row), flush=True)
        rows.append(row)
    plot(rows, args.out)


if __name__ == "__main__":
    main()
