"""Metrics, health and JSON logs of a real relay and a real worker, each a
``ledgerq`` child process with ``--metrics-port``, against the real PostgreSQL
and RabbitMQ: after tasks ran, ``/metrics`` counts exactly what ran; ``/readyz``
is unready while a worker cannot reach its broker (pointed at a closed port,
so the shared servers are never touched) while ``/healthz`` says it is alive;
and ``--log-format json`` names the task on every task line."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from prometheus_client.parser import text_string_to_metric_families

from ledgerq import TaskSpec
from ledgerq.core.config import ConfigError, Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.retry import RetryPolicy
from tests.harness import enqueue_committed
from tests.pki import free_port
from tests.support import ledgerq, ledgerq_env

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), error.read().decode()


def scrape(port: int) -> Samples:
    status, text = get(port, "/metrics")
    assert status == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("ledgerq_")
    }


def wait_until(predicate: object, timeout: float = 30.0) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("not reached in time")
        time.sleep(0.1)


@contextmanager
def service(settings: Settings, *args: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "ledgerq", *args],
        env=ledgerq_env(settings, **env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=60)


def ready(port: int) -> bool:
    try:
        return get(port, "/readyz")[0] == 200
    except OSError:
        return False


async def settle(ledger: PgLedger, ids: list[int], timeout: float = 60) -> dict[int, str]:
    deadline = time.monotonic() + timeout
    while True:
        where = await ledger.whereabouts(ids)
        if len(where) == len(ids) and all(s in ("succeeded", "dead") for s in where.values()):
            return where
        assert time.monotonic() < deadline, where
        await asyncio.sleep(0.1)


async def test_metrics_count_what_ran_and_json_logs_name_each_task(
    settings: Settings, ledger: PgLedger
) -> None:
    relay_port, worker_port = free_port(), free_port()
    now = RetryPolicy.schedule(0)
    with (
        service(settings, "relay", "--metrics-port", str(relay_port)) as relay,
        service(
            settings,
            "--log-format",
            "json",
            "worker",
            "--app",
            "tests.apps.metrics_app",
            LEDGERQ_METRICS_PORT=str(worker_port),  # the setting, not the option
        ) as worker,
    ):
        await asyncio.to_thread(wait_until, lambda: ready(relay_port) and ready(worker_port))
        assert get(relay_port, "/healthz") == (200, "alive\n")
        ids = enqueue_committed(
            settings,
            [TaskSpec("m.ok", {"order": i}) for i in range(5)]
            + [TaskSpec("m.sync_ok", {"order": 9})]
            + [TaskSpec("m.fails", {}, max_attempts=2, retry=now) for _ in range(2)],
        )
        statuses = await settle(ledger, ids)
        assert sorted(statuses.values()) == ["dead"] * 2 + ["succeeded"] * 6
        relay_metrics, worker_metrics = scrape(relay_port), scrape(worker_port)
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=60)
        assert relay.poll() is None

    # 8 tasks, 2 of them twice: 10 publishes, 10 claims.
    assert relay_metrics[("ledgerq_published_total", ())] == 10
    assert relay_metrics[("ledgerq_returned_total", ())] == 0
    assert relay_metrics[("ledgerq_confirms_nacked_total", ())] == 0
    assert worker_metrics[("ledgerq_claimed_total", ())] == 10
    assert worker_metrics[("ledgerq_skipped_duplicates_total", ())] == 0
    ended = {
        labels: value
        for (name, labels), value in worker_metrics.items()
        if name == "ledgerq_tasks_ended_total"
    }
    assert ended == {
        (("kind", "m.ok"), ("outcome", "succeeded")): 5,
        (("kind", "m.sync_ok"), ("outcome", "succeeded")): 1,
        (("kind", "m.fails"), ("outcome", "failed")): 2,
        (("kind", "m.fails"), ("outcome", "dead")): 2,
    }
    assert worker_metrics[("ledgerq_handler_duration_seconds_count", (("kind", "m.ok"),))] == 5
    assert worker_metrics[("ledgerq_handler_duration_seconds_count", (("kind", "m.fails"),))] == 4
    latency = ("ledgerq_start_latency_seconds_count", (("kind", "m.fails"),))
    assert worker_metrics[latency] == 4
    assert 0 < worker_metrics[("ledgerq_start_latency_seconds_sum", (("kind", "m.ok"),))] < 30

    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    assert lines and len(lines) == len(output.splitlines()), output  # every line is JSON
    handled = [line for line in lines if line["message"].startswith("handling order")]
    assert len(handled) == 6
    assert {(line["kind"], line["attempt"]) for line in handled} == {
        ("m.ok", 1),
        ("m.sync_ok", 1),  # from the handler's thread too
    }
    assert {line["task_id"] for line in handled} == set(ids[:6])
    deaths = [line for line in lines if "is dead after" in line["message"]]
    assert {(line["task_id"], line["kind"], line["attempt"]) for line in deaths} == {
        (i, "m.fails", 2) for i in ids[6:]
    }


def test_readyz_is_unready_while_the_broker_cannot_be_reached(settings: Settings) -> None:
    port = free_port()
    closed = f"amqp://guest:guest@127.0.0.1:{free_port()}/"
    with service(
        settings,
        "--connect-wait",
        "30",
        "worker",
        "--app",
        "tests.apps.metrics_app",
        "--metrics-port",
        str(port),
        LEDGERQ_AMQP_URL=closed,
    ):
        wait_until(lambda: _answers(port), timeout=20)
        assert get(port, "/healthz") == (200, "alive\n")
        status, text = get(port, "/readyz")
        assert (status, text) == (503, "starting: connecting to PostgreSQL and RabbitMQ\n")
        assert get(port, "/nothing")[0] == 404


def _answers(port: int) -> bool:
    try:
        get(port, "/healthz")
        return True
    except OSError:
        return False


def test_a_metrics_port_in_use_stops_the_relay_with_one_line(settings: Settings) -> None:
    with service(settings, "relay", "--metrics-port", str(port := free_port())) as first:
        wait_until(lambda: ready(port))
        result = ledgerq(settings, "relay", "--metrics-port", str(port))
        assert first.poll() is None
    assert result.returncode == 78, result.stderr
    assert result.stderr.startswith(f"ledgerq: --metrics-port {port}: cannot listen")
    assert result.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("value", ["65536", "http", "-1"])
def test_a_bad_metrics_port_setting_is_refused(value: str) -> None:
    with pytest.raises(ConfigError, match="LEDGERQ_METRICS_PORT must be a TCP port"):
        Settings.from_env({"LEDGERQ_METRICS_PORT": value})
