"""``ledgerq bench`` and ``ledgerq demo`` on a MariaDB ledger (issue 29), end to end
through real relay and worker processes. Like tests/integration/test_bench.py, they
assert no speed: that every phase ran and reported, and what the ledger says after.

- the bench's broker path (every drain, the one-row handlers sync and async
  among them, the idle and loaded latency, the direct path's drain in the same
  run): each one-row task wrote its row once, the last drain's tasks each
  finished once; the Celery peer (PostgreSQL's) is skipped with a note;
- ``bench --direct``: the direct drain and its idle latency; pgqueuer's peer skipped;
- the phases of the features built on MySQL since (``--ordering-keys``, ``--graph``,
  ``--ledger-shards``, ``--results``), at tiny sizes, with PostgreSQL's keys and
  figures; ``--results`` over MySQL's waiter limit refused in one line;
- the demo: committed orders' tasks each succeed once, rolled-back ones never run.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from ledgerq.bench.results import MYSQL_WAITERS
from ledgerq.bench.suite import KEYS, bench_settings, sharded_settings
from ledgerq.core.config import Settings
from tests.conftest import delete_broker_objects
from tests.integration.test_bench import WHOLE_RUN, _delete_bench_broker_objects
from tests.mariadb import mariadb_url, recreate
from tests.mariadb_broker import finished, query, routed
from tests.support import ledgerq, ledgerq_env

#: Tasks per drain: enough for every phase to have work, small enough for seconds.
TASKS = 40


@pytest.fixture
def on_mariadb(base_settings: Settings) -> Settings:
    """Settings on a MariaDB database of this file's own (``<suite's>_my_tools``: the
    bench appends ``_bench``, which it starts from nothing), a private AMQP prefix."""
    url = mariadb_url(base_settings.database_url) + "_tools"
    settings = replace(
        base_settings, database_url=url, amqp_prefix=f"lqtest.{uuid.uuid4().hex[:10]}"
    )
    recreate(settings.database_url)  # the demo's (it migrates it afresh)
    recreate(bench_settings(settings).database_url)
    return settings


def _bench(settings: Settings, *args: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "ledgerq", "bench", "--tasks", str(TASKS), "--json", *args],
        env=ledgerq_env(settings),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    data: dict[str, Any] = json.loads(done.stdout)
    return data


@WHOLE_RUN
def test_bench_on_mariadb_drains_every_handler_and_skips_the_peer(on_mariadb: Settings) -> None:
    try:
        data = _bench(
            on_mariadb, *("--handler", "all", "--idle-rate", "50", "--load-rate", "200"),
            *("--peer", "celery"),
        )  # fmt: skip
        for key in KEYS:
            assert key in data, key
        drains = ("drain_sync_db_per_s", "drain_async_db_per_s", "drain_per_s", "drain_db_per_s")
        positive = (*drains, "direct_drain_per_s", "pipeline_ceiling_per_s", "enqueue_per_s")
        assert all(data[key] > 0 for key in positive), {k: data[k] for k in positive}
        for phase in ("latency_ms", "latency_ms_load"):  # the broker path's, polled
            assert 0 < data[phase]["p50"] <= data[phase]["p99"], data[phase]
        assert "celery_db_per_s" not in data and "PostgreSQL" in str(data["celery"])
        bench_db = bench_settings(on_mariadb)
        # sync-db, async-db and group drains: each of their tasks wrote its row once
        [(rows, distinct)] = query(
            bench_db, "SELECT COUNT(*), COUNT(DISTINCT task_id) FROM ledgerq_demo_receipts"
        )
        assert (rows, distinct) == (3 * TASKS, 3 * TASKS)
        # The last drain (the direct path's, no-op): every task finished once.
        assert sorted(finished(bench_db).values()) == [("succeeded", 1)] * TASKS
        assert query(bench_db, "SELECT COUNT(*) FROM ledgerq_tasks") == [(0,)]
    finally:
        _delete_bench_broker_objects(on_mariadb, celery=False)


@WHOLE_RUN
def test_bench_direct_on_mariadb_measures_the_drain_and_idle_latency(
    on_mariadb: Settings,
) -> None:
    data = _bench(on_mariadb, "--direct", "--idle-rate", "50")
    assert data["direct_drain_per_s"] > 0
    latency = data["direct_latency_ms"]
    assert 0 < latency["p50"] <= latency["p99"], latency
    assert "pgqueuer_per_s" not in data and "PostgreSQL" in str(data["pgqueuer"])
    # the idle phase's probes (and its warm-up task): each finished once
    statuses = finished(bench_settings(on_mariadb)).values()
    assert set(statuses) == {("succeeded", 1)} and len(statuses) > 10


@WHOLE_RUN
def test_bench_ordering_keys_and_graph_phases_on_mariadb(on_mariadb: Settings) -> None:
    """One run: the no-op drain, again over 4 ordering keys, then the graph drain (4
    groups of 10: 9 members and their join), each beside the plain drain."""
    try:
        data = _bench(
            on_mariadb, *("--handler", "noop", "--ordering-keys", "4", "--graph", "4"),
            *("--no-latency", "--no-vs-direct"),
        )  # fmt: skip
        assert data["drain_per_s"] > 0 and data["drain_ordered_per_s"] > 0
        assert data["ordered_ratio"] == round(data["drain_ordered_per_s"] / data["drain_per_s"], 3)
        assert data["graph"] == {"groups": 4, "width": 10, "tasks": TASKS, "edges": 36}
        assert data["drain_graph_per_s"] > 0 and data["graph_ratio"] > 0
        assert "graph_extra_us_per_edge" in data
        # The last drain (the graph's): every member and join finished once, none waits.
        bench_db = bench_settings(on_mariadb)
        assert sorted(finished(bench_db).values()) == [("succeeded", 1)] * TASKS
        assert query(bench_db, "SELECT COUNT(*) FROM ledgerq_tasks") == [(0,)]
    finally:
        _delete_bench_broker_objects(on_mariadb, celery=False)


@WHOLE_RUN
def test_bench_on_two_mariadb_ledger_shards_drains_both(on_mariadb: Settings) -> None:
    shards = [
        replace(on_mariadb, database_url=url)
        for url in sharded_settings(on_mariadb, 2).database_urls
    ]
    for shard in shards:
        recreate(shard.database_url)
    try:
        data = _bench(on_mariadb, "--ledger-shards", "2")
        assert data["config"]["ledger_shards"] == 2
        assert data["enqueue_batch_per_s"] > 0 and data["drain_per_s"] > 0
        # The backlog went half to each shard (a chunk each), and each finished once.
        ran = [finished(shard) for shard in shards]
        assert [len(each) for each in ran] == [TASKS // 2, TASKS // 2]
        assert {v for each in ran for v in each.values()} == {("succeeded", 1)}
    finally:
        _delete_bench_broker_objects(on_mariadb, celery=False)


def test_bench_results_on_mariadb_polls_each_waiter(on_mariadb: Settings) -> None:
    """``--results``: every waiter came back after its end (no notification on
    MySQL, each waiter read its task again at least once); over the limit: one line."""
    data = _bench(on_mariadb, "--results", "20")["results"]
    assert data["waiters"] == 20 and data["notifications"] == 0
    assert data["reads"] >= 20, data
    assert 0 < data["p50_ms"] <= data["p90_ms"] <= data["p99_ms"] <= data["max_ms"], data
    # the finisher ended each task once, the worker's way (claim, then finish)
    assert sorted(finished(bench_settings(on_mariadb)).values()) == [("succeeded", 1)] * 20
    done = ledgerq(on_mariadb, "bench", "--results", str(MYSQL_WAITERS + 1))
    assert done.returncode == 78, done.stderr
    assert f"at most {MYSQL_WAITERS}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_demo_on_mariadb_runs_each_committed_task_once(
    on_mariadb: Settings, tmp_path: Path
) -> None:
    """The demo's own check (exit 0 only when every committed task succeeded once and
    every committed order has its one receipt), and its summary read back."""
    done = ledgerq(on_mariadb, "demo", "--orders", "30", "--json", "--logs", str(tmp_path))
    try:
        assert done.returncode == 0, done.stderr[-3000:]
        summary = json.loads(done.stdout)
        committed = summary["tasks_committed"]
        assert summary["ok"] and summary["by_status"] == {"succeeded": committed}
        assert summary["receipts_written"] == summary["receipts_expected"] > 0
        assert summary["receipt_duplicates"] == 0
        assert summary["orders_rolled_back"] > 0  # seed 7 rolls some back
        ran = finished(on_mariadb).values()  # flaky tasks succeed at their second attempt
        assert len(ran) == committed and {status for status, _ in ran} == {"succeeded"}
    finally:
        delete_broker_objects(on_mariadb, routed(on_mariadb))
