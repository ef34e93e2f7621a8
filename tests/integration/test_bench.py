"""``ledgerq bench`` runs end to end and prints every figure. It asserts no speed:
benchmarks measure, tests check that they run."""

from __future__ import annotations

import json
import subprocess
import sys

import pika

from ledgerq.bench.suite import KEYS
from ledgerq.ledger.config import Settings
from ledgerq.relay.broker.topology import Topology
from tests.support import ledgerq_env


def test_bench_runs_and_prints_every_key_with_the_celery_peer(settings: Settings) -> None:
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
    finally:  # the bench declares its queues under <prefix>-bench
        conn = pika.BlockingConnection(pika.URLParameters(settings.amqp_url))
        channel = conn.channel()
        topology = Topology(f"{settings.amqp_prefix}-bench")
        for name in (topology.task_queue("default").name, topology.dead_letter_queue.name):
            channel.queue_delete(name)
        channel.exchange_delete(topology.exchange.name)
        channel.exchange_delete(topology.dead_letter_exchange.name)
        celery = f"{settings.amqp_prefix}-bench.celery"  # the Celery peer's queue
        channel.queue_delete(celery)
        channel.exchange_delete(celery)
        conn.close()
