"""Dead-task alerts against real local HTTP servers (``http.server`` on a thread):
one that answers, one that trickles its answer forever, one that redirects, and
one that is down; and where the worker and the reconciler send them."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ledgerq import Abort, AsyncTaskContext, Registry, TaskSpec
from ledgerq.alerting.alerts import AlertConfigError, AlertSender
from ledgerq.alerting.webhook import check_webhook_url, webhook_alert
from ledgerq.compose import alert_hook, open_ledger, open_reconciler
from ledgerq.consumers.worker import WorkerConfig
from ledgerq.core.config import Settings
from ledgerq.ledger.model import Finished
from ledgerq.ledger.pg import PgLedger
from ledgerq.relay.reconciler import ReconcilerConfig
from tests.harness import Pipeline, enqueue_committed, stop_worker_during_alert
from tests.support import ledgerq, until


class Server:
    """A local HTTP server whose handler ``behaviour`` decides what it does."""

    def __init__(self, behaviour: str) -> None:
        self.behaviour = behaviour
        self.requests: list[tuple[str, str, bytes]] = []
        self.arrivals: list[float] = []
        self.stop = threading.Event()
        self.redirect_to = ""
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return None

            def _handle(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                server.requests.append((self.command, self.path, self.rfile.read(length)))
                server.arrivals.append(time.monotonic())
                try:
                    if server.behaviour == "trickle":
                        # A byte every 0.2 s and never a whole line: each socket read
                        # succeeds, so only a total deadline ends it.
                        self.wfile.write(b"HTTP/1.1 200")
                        while not server.stop.wait(0.2):
                            self.wfile.write(b" ")
                            self.wfile.flush()
                        return
                    if server.behaviour == "redirect":
                        self.send_response(307)
                        self.send_header("Location", server.redirect_to)
                    else:
                        self.send_response(200)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    return

            do_POST = _handle
            do_GET = _handle

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/hook/s3cret-token?x=1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@contextmanager
def server(behaviour: str) -> Iterator[Server]:
    with Server(behaviour) as running:
        yield running


def down_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"


def dead(task_id: int = 1) -> Finished:
    return Finished(task_id, "t.dead", 3, "dead", "boom")


# -- the URL -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "ftp://example.com/x",
        "file:///etc/passwd",
        "example.com/hook",
        "http:///nohost",
        "http://user:pw@example.com/",
        "http://example.com/a b",
        "http://example.com:99999/",
    ],
)
def test_a_webhook_url_that_is_not_plain_http_or_https_is_refused(url: str) -> None:
    with pytest.raises(AlertConfigError) as refused:
        webhook_alert(url)
    assert "pw" not in str(refused.value) and "passwd" not in str(refused.value)


def test_the_alert_hook_checks_the_webhook_setting_at_once() -> None:
    with pytest.raises(AlertConfigError, match="http:// or https://"):
        alert_hook(Settings(alert_webhook="gopher://example.com/"))
    assert check_webhook_url("https://example.com/hook").hostname == "example.com"
    assert alert_hook(Settings(alert_webhook="https://example.com/hook")) is not None


@pytest.mark.parametrize(
    "command", [("reconcile",), ("worker", "--app", "tests.apps.slow_app")], ids=lambda c: c[0]
)
def test_a_bad_webhook_fails_a_service_at_start_with_one_line(
    settings: Settings, command: tuple[str, ...]
) -> None:
    result = ledgerq(settings, *command, LEDGERQ_ALERT_WEBHOOK="ftp://user:pw@example.com/x")
    assert result.returncode != 0
    assert result.stderr.startswith("ledgerq: ") and result.stderr.strip().count("\n") == 0
    assert "LEDGERQ_ALERT_WEBHOOK must be an http:// or https:// URL" in result.stderr
    assert "pw" not in result.stderr


# -- one alert ---------------------------------------------------------------------------


async def test_a_webhook_gets_one_json_post() -> None:
    with server("ok") as srv:
        sender = AlertSender(webhook_alert(srv.url))
        sender.submit(dead(7))
        await sender.close(None)
    [(method, path, body)] = srv.requests
    assert (method, path) == ("POST", "/hook/s3cret-token?x=1")
    assert json.loads(body) == {
        "event": "task.dead",
        "id": 7,
        "kind": "t.dead",
        "attempts": 3,
        "last_error": "boom",
    }


async def test_a_trickling_server_is_cut_off_at_the_total_deadline(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with server("trickle") as srv:
        sender = AlertSender(webhook_alert(srv.url), deadline_s=0.6)
        started = time.monotonic()
        sender.submit(dead())
        await sender.close(None)
        elapsed = time.monotonic() - started
    # the lower bound is the deadline; the upper only says it ended (the trickle never
    # does), generous for a loaded machine
    assert 0.5 < elapsed < 15.0
    assert sender.timed_out == 1 and len(srv.requests) == 1
    assert "longer than its 0.6 s deadline" in caplog.text


async def test_a_redirect_is_not_followed(caplog: pytest.LogCaptureFixture) -> None:
    with server("ok") as target, server("redirect") as srv:
        srv.redirect_to = target.url
        sender = AlertSender(webhook_alert(srv.url))
        sender.submit(dead())
        await sender.close(None)
    assert len(srv.requests) == 1 and target.requests == []
    assert "refused the alert" in caplog.text and "answered 307" in caplog.text
    assert "not followed" in caplog.text
    assert "s3cret" not in caplog.text  # logs name the host, never the path


async def test_a_server_that_is_down_is_retried_three_times_then_given_up(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sender = AlertSender(webhook_alert(down_url()))
    started = time.monotonic()
    sender.submit(dead())
    await sender.close(None)
    # Three attempts, 0.5 s and 1.5 s apart, within the 5 s deadline (the attempt
    # lines below and timed_out == 0 say so; the upper bound is only a backstop).
    assert 2.0 <= time.monotonic() - started < 15.0
    assert "dead-task webhook http://127.0.0.1" in caplog.text
    assert "(attempt 1 of 3, retrying in 0.5 s)" in caplog.text
    assert "(attempt 2 of 3, retrying in 1.5 s)" in caplog.text
    assert "(attempt 3 of 3, giving up)" in caplog.text
    assert sender.timed_out == 0


async def test_alerts_run_a_few_at_a_time() -> None:
    with server("trickle") as srv:
        sender = AlertSender(webhook_alert(srv.url), concurrency=3, deadline_s=0.5)
        started = time.monotonic()
        for i in range(9):
            sender.submit(dead(i))
        await sender.close(None)
        elapsed = time.monotonic() - started
    assert len(srv.requests) == 9 and sender.timed_out == 9
    # Three at a time: nine alerts that each run to their 0.5 s deadline take three
    # rounds (all at once would take one). Measured on the sender's clock: when the
    # server's accept loop lags on a busy machine, the arrivals it records bunch up
    # and say nothing about the sender, but no delay can make three rounds shorter.
    assert elapsed >= 3 * 0.5 - 0.05, elapsed


async def test_a_blocking_sync_hook_is_abandoned_at_its_deadline() -> None:
    release = threading.Event()

    def blocking(row: Finished) -> None:
        release.wait(30)

    sender = AlertSender(blocking, deadline_s=0.3)
    started = time.monotonic()
    sender.submit(dead())
    await sender.close(None)
    release.set()
    # abandoned, not waited for: the hook would block for 30 s
    assert time.monotonic() - started < 15.0 and sender.timed_out == 1


# -- where the services send them --------------------------------------------------------


async def test_the_worker_abandons_alerts_still_running_after_its_grace(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    registry = Registry()

    @registry.task("t.doomed")
    async def doomed(payload: Any, ctx: AsyncTaskContext) -> None:
        raise Abort("no point retrying")

    [task_id] = enqueue_committed(settings, [TaskSpec("t.doomed", {})])
    config = WorkerConfig(concurrency=2, lease_s=30, heartbeat_s=5, grace_s=1)
    with server("trickle") as srv:
        async with Pipeline(
            settings, registry, worker=config, alert=webhook_alert(srv.url)
        ) as pipe:
            await pipe.settle([task_id])
            deadline = time.monotonic() + 5
            while not srv.requests and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            stopping = time.monotonic()
            sender = pipe.worker.finisher.alerts
        stopped = time.monotonic() - stopping
    assert len(srv.requests) == 1  # the alert was under way when the worker stopped
    # the grace (1 s), not the alert's 5 s deadline, ended the wait: the alert was
    # abandoned (cut by the grace), not timed out (cut by its deadline), and the
    # abandoning line below says so; neither depends on how fast the machine is. The
    # bound on the stop is a backstop, generous for a loaded machine.
    assert (sender.abandoned, sender.timed_out) == (1, 0)
    assert stopped < 30, stopped
    assert (
        f"abandoning 1 dead-task alerts still running when the wait ran out (tasks {task_id})"
        in caplog.text
    )


@pytest.fixture
async def other_ledger(settings: Settings) -> AsyncIterator[PgLedger]:
    async with open_ledger(settings, "test-other", pool_size=1) as ledger:
        yield ledger


async def test_the_reconciler_alerts_after_its_locked_pass(
    settings: Settings, ledger: PgLedger, other_ledger: PgLedger
) -> None:
    ids = enqueue_committed(settings, [TaskSpec("t.r", {}, max_attempts=1) for _ in range(3)])
    for i in ids:  # three workers, each dead with one task: each task is charged
        await ledger.claim([(i, 0)], f"gone:{i}", lease_s=0.05)

    async def lapsed() -> bool:
        return await ledger.count_expired() == len(ids)

    await until("the three leases lapse", lapsed)
    lock_free_during_alerts: list[bool] = []
    running = [0, 0]  # now, most at once

    async def hook(row: Finished) -> None:
        async with other_ledger.exclusive() as got:
            lock_free_during_alerts.append(got)
        running[0] += 1
        running[1] = max(running)
        try:
            await asyncio.sleep(60)  # a slow webhook: cut at the deadline
        finally:
            running[0] -= 1

    async with AsyncExitStack() as stack:
        reconciler = await stack.enter_async_context(
            open_reconciler(settings, ReconcilerConfig(), alert=hook)
        )
        started = time.monotonic()
        counts = await reconciler.run_once()
        took = time.monotonic() - started

    assert counts.dead == 3
    # The alerts ran once the locked pass had let the lock go, so the pass did not wait
    # for them (their 5 s deadline); its own time is only bounded as a backstop.
    assert lock_free_during_alerts == [True, True, True]
    assert counts.elapsed_s < 30
    # In parallel (all three at once, seen by the hooks, not by a clock), each cut at
    # its 5 s deadline: not waited out (60 s), within the reconciler's 30 s wait
    assert running == [0, 3]
    assert took < counts.elapsed_s + 25.0


async def test_alerts_log_at_error_for_the_default_hook(caplog: pytest.LogCaptureFixture) -> None:
    from ledgerq.alerting.alerts import log_alert

    sender = AlertSender(log_alert)
    with caplog.at_level(logging.ERROR, logger="ledgerq.alerts"):
        sender.submit(dead(11))
        await sender.close(None)
    assert "task 11 (t.dead) is dead after 3 attempts: boom" in caplog.text


async def test_a_worker_process_exits_within_its_grace_while_a_webhook_trickles(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The finding: a slow webhook kept a worker alive 38 s after SIGTERM with --grace 2.
    with server("trickle") as srv:
        monkeypatch.setenv("LEDGERQ_ALERT_WEBHOOK", srv.url)
        code, output, took = await stop_worker_during_alert(settings, lambda: bool(srv.requests))
    assert code == 0, output
    # the grace and process teardown, not the webhook (38 s, the finding): the abandoning
    # line below says the grace ended the alert; the bound is generous for a loaded machine
    assert took < 2 + 13, (took, output)
    assert "abandoning 1 dead-task alerts" in output
