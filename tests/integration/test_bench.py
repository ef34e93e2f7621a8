"""``ledgerq bench`` runs end to end and prints every figure. It asserts no speed:
benchmarks measure, tests check that they run."""

from __future__ import annotations

import json
import subprocess
import sys

import pika
import psycopg
import pytest
from psycopg import sql
from sqlalchemy.engine import make_url

from ledgerq.bench.suite import KEYS, bench_settings, sharded_settings
from ledgerq.broker.topology import Topology
from ledgerq.core.config import Settings
from ledgerq.ledger.pg.engines import libpq_url
from tests.conftest import drop_database
from tests.support import ledgerq_env

#: A whole bench run in a subprocess has its own bound (240 s); pytest's default
#: 120 s is too tight for one on a loaded two-core machine.
WHOLE_RUN = pytest.mark.timeout(300)


def _drop_bench_database(settings: Settings) -> None:
    """The bench's own database starts from nothing, like the suite's: one left by an
    earlier run (of an older schema, say) must not decide this one."""
    url = make_url(bench_settings(settings).database_url)
    assert url.database, "the bench database has a name"
    maintenance = libpq_url(url.set(database="postgres").render_as_string(False))
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(url.database))
        )


@WHOLE_RUN
def test_bench_runs_and_prints_every_key_with_the_celery_peer(settings: Settings) -> None:
    _drop_bench_database(settings)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "ledgerq",
            "bench",
            "--tasks",
            "200",
            "--json",
            "--idle-rate",
            "50",
            "--load-rate",
            "400",
            "--ordering-keys",
            "20",
            "--peer",
            "celery",
            "--relays",
            "2",
            "--graph",
            "4",
        ],
        env=ledgerq_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        data = json.loads(result.stdout)
        assert data["config"]["relays"] == 2  # two relays shared the drains' due rows
        for key in KEYS:
            assert key in data, key
        for key in ("p50", "p95", "p99"):
            assert isinstance(data["latency_ms"][key], float | int)
        positive = (
            "enqueue_per_s",
            "enqueue_batch_per_s",
            "drain_per_s",
            "drain_db_per_s",
            "drain_sync_db_per_s",
            "drain_async_db_per_s",
            "drain_sync_db_cpu_ms_per_task",
            "pipeline_ceiling_per_s",
            "celery_db_per_s",
            "drain_sync_db_vs_celery",
            "raw_publish_per_s",
            "raw_consume_per_s",
            "worker_rss_mb",
        )
        assert all(data[key] > 0 for key in positive), {k: data[k] for k in positive}
        assert data["drain_ordered_per_s"] > 0 and data["ordered_ratio"] > 0
        # The graph drain (issue 27): 4 groups of 49 joined by one task each, beside
        # the plain no-op drain of the same run, and the cost per edge between them.
        assert data["graph"] == {"groups": 4, "width": 50, "tasks": 200, "edges": 196}
        assert data["drain_graph_per_s"] > 0 and data["graph_ratio"] > 0
        assert isinstance(data["graph_extra_us_per_edge"], float | int)
        # The direct path drained the same backlog in the same run, for the ratio.
        assert data["direct_drain_per_s"] > 0 and data["drain_vs_direct"] > 0
    finally:
        _delete_bench_broker_objects(settings, celery=True)


@WHOLE_RUN
def test_bench_on_two_ledger_shards_drains_both(settings: Settings) -> None:
    sharded = sharded_settings(settings, 2)
    for url in sharded.database_urls:
        drop_database(url)
    result = subprocess.run(
        [sys.executable, "-m", "ledgerq", "bench", "--tasks", "400", "--ledger-shards", "2"],
        env=ledgerq_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        data = json.loads(result.stdout)  # JSON without --json: the table is the full suite's
        assert data["config"]["ledger_shards"] == 2
        assert data["enqueue_batch_per_s"] > 0 and data["drain_per_s"] > 0
        for url in sharded.database_urls:  # both shards took a share and drained it
            with psycopg.connect(libpq_url(url)) as conn:
                row = conn.execute("SELECT count(*) FROM ledgerq_history").fetchone()
            assert row is not None and row[0] > 0
    finally:
        for url in sharded.database_urls:
            drop_database(url)
        _delete_bench_broker_objects(settings, celery=False)


def _delete_bench_broker_objects(settings: Settings, *, celery: bool) -> None:
    """The bench declares its queues under <prefix>-bench (the Celery peer's too)."""
    conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
    channel = conn.channel()
    topology = Topology(f"{settings.amqp_prefix}-bench")
    for name in (topology.task_queue("default").name, topology.dead_letter_queue.name):
        channel.queue_delete(name)
    channel.exchange_delete(topology.exchange.name)
    channel.exchange_delete(topology.dead_letter_exchange.name)
    if celery:
        peer = f"{settings.amqp_prefix}-bench.celery"
        channel.queue_delete(peer)
        channel.exchange_delete(peer)
    conn.close()


@WHOLE_RUN
def test_bench_direct_measures_the_direct_path_and_pgqueuer(settings: Settings) -> None:
    """``--direct``: no broker at all (the AMQP URL names a closed port), no relay."""
    _drop_bench_database(settings)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "ledgerq", "bench", "--direct", "--tasks", "300"),
            *("--idle-rate", "100", "--json"),
        ],
        env=ledgerq_env(settings, LEDGERQ_AMQP_URL="amqp://guest:guest@127.0.0.1:1/"),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    data = json.loads(result.stdout)
    assert data["config"]["direct"] is True
    positive = ("direct_drain_per_s", "direct_drain_cpu_ms_per_task", "worker_rss_mb")
    assert all(data[key] > 0 for key in positive), data
    # the idle latency of the direct path (woken by NOTIFY), its workers warmed up first
    assert 0 < data["direct_latency_ms"]["p50"] <= data["direct_latency_ms"]["p99"]
    assert data["pgqueuer_per_s"] > 0  # pgqueuer comes with the dev extra
    assert data["direct_vs_pgqueuer"] == round(
        data["direct_drain_per_s"] / data["pgqueuer_per_s"], 2
    )


@WHOLE_RUN
def test_bench_drains_the_cpu_bound_kind_under_worker_processes(settings: Settings) -> None:
    """``--handler cpu --processes 2`` (issue 26, item 5): the measurement docs/performance.md
    quotes, threads against processes, runs and reports the CPU-bound kind's drain."""
    _drop_bench_database(settings)
    result = subprocess.run(
        [
            *(sys.executable, "-m", "ledgerq", "bench", "--handler", "cpu", "--tasks", "60"),
            *("--no-latency", "--no-vs-direct", "--concurrency", "2", "--processes", "2"),
            "--json",
        ],
        env=ledgerq_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    try:
        assert result.returncode == 0, result.stderr[-3000:]
        data = json.loads(result.stdout)
        assert (data["config"]["handler"], data["config"]["processes"]) == ("cpu", 2)
        assert data["config"]["worker_args"] == ["--processes", "2"]
        assert data["drain_cpu_per_s"] > 0 and data["drain_cpu_cpu_ms_per_task"] > 0, data
        assert len(data["drain_cpu_runs"]) == 1
        with psycopg.connect(libpq_url(bench_settings(settings).database_url)) as conn:
            row = conn.execute(
                "SELECT count(*) FROM ledgerq_history WHERE kind = 'demo.cpu'"
                " AND status = 'succeeded'"
            ).fetchone()
        assert row == (60,)  # every CPU-bound task ran to its end
    finally:
        _delete_bench_broker_objects(settings, celery=False)
