"""Dead-task email against real local SMTP servers (aiosmtpd, started here): one
that wants STARTTLS and a login, one that speaks SMTPS, one that is down, one
that never answers; the callable channel; and what a service does with bad
alert settings.

The servers' certificates come from a throwaway CA (:mod:`tests.pki`); ledgerq
trusts it through ``LEDGERQ_SMTP_CA_FILE`` and verifies the host name."""

from __future__ import annotations

import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from ledgerq.alerting.alerts import AlertConfigError, AlertSender
from ledgerq.compose import alert_hook
from ledgerq.core.config import ConfigError, Settings
from ledgerq.ledger.model import Finished
from tests.apps import alert_hooks
from tests.harness import stop_worker_during_alert
from tests.pki import Pki, free_port, make_pki
from tests.support import ledgerq

USER, PASSWORD = "alerts", "Smtp-s3cret-pw"

if shutil.which("openssl") is None:
    pytest.skip("needs the openssl command line", allow_module_level=True)


@pytest.fixture(scope="module")
def pki() -> Iterator[Pki]:
    directory = Path(tempfile.mkdtemp(prefix="ledgerq-smtp-"))
    try:
        yield make_pki(directory)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


class Inbox:
    """aiosmtpd's handler: keeps each message; the authenticator checks USER/PASSWORD."""

    def __init__(self) -> None:
        self.messages: list[Envelope] = []
        self.logins: list[tuple[bytes, bool]] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.messages.append(envelope)
        return "250 OK"

    def authenticate(
        self, server: SMTP, session: Session, envelope: Envelope, mechanism: str, data: Any
    ) -> AuthResult:
        assert isinstance(data, LoginPassword)
        ok = data.login == USER.encode() and data.password == PASSWORD.encode()
        self.logins.append((data.login, ok))
        return AuthResult(success=ok, handled=False)  # aiosmtpd then answers 535


@contextmanager
def smtp_server(pki: Pki, mode: str) -> Iterator[tuple[Inbox, int]]:
    """A real SMTP server on 127.0.0.1: ``starttls`` (STARTTLS and AUTH required) or
    ``ssl`` (SMTPS, AUTH required)."""
    import ssl

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(pki.server_cert, pki.server_key)
    inbox, port = Inbox(), free_port()
    common: dict[str, Any] = dict(
        hostname="127.0.0.1",
        port=port,
        authenticator=inbox.authenticate,
        auth_require_tls=True,
    )
    if mode == "ssl":
        # TLS from the first byte; aiosmtpd does not count it as TLS for AUTH.
        common["auth_require_tls"] = False
        controller = Controller(inbox, ssl_context=context, **common)
    else:
        controller = Controller(inbox, tls_context=context, require_starttls=True, **common)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


@contextmanager
def silent_server() -> Iterator[tuple[int, list[socket.socket]]]:
    """Accepts connections and never says a word (no SMTP greeting)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


def email_settings(pki: Pki, port: int, tls: str = "starttls", **changes: Any) -> Settings:
    base = Settings(
        smtp_host="127.0.0.1",
        smtp_port=port,
        smtp_tls=tls,
        smtp_ca_file=str(pki.ca),
        smtp_user=USER,
        smtp_password=PASSWORD,
        alert_email_from="ledgerq@example.com",
        alert_email_to=("ops@example.com", "oncall@example.com"),
    )
    return replace(base, **changes)


def dead(task_id: int = 1) -> Finished:
    return Finished(task_id, "t.dead", 3, "dead", "Traceback...\nValueError: boom")


async def send(settings: Settings, row: Finished, deadline_s: float = 5.0) -> AlertSender:
    sender = AlertSender(alert_hook(settings), deadline_s=deadline_s)
    sender.submit(row)
    await sender.close(None)
    return sender


# -- delivered -----------------------------------------------------------------------------


@pytest.mark.parametrize("tls", ["starttls", "ssl"])
async def test_a_dead_task_is_emailed_over_tls_with_a_login(
    pki: Pki, tls: str, caplog: pytest.LogCaptureFixture
) -> None:
    with smtp_server(pki, tls) as (inbox, port):
        await send(email_settings(pki, port, tls), dead(7))
    [envelope] = inbox.messages
    assert inbox.logins == [(USER.encode(), True)]
    assert envelope.mail_from == "ledgerq@example.com"
    assert envelope.rcpt_tos == ["ops@example.com", "oncall@example.com"]
    text = envelope.content.decode() if isinstance(envelope.content, bytes) else ""
    assert "Subject: [ledgerq] task 7 (t.dead) is dead after 3 attempts" in text
    assert "ValueError: boom" in text and "ledgerq show 7" in text
    assert PASSWORD not in caplog.text


# -- refused or failing ----------------------------------------------------------------


async def test_a_wrong_password_is_refused_once_and_never_logged(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "Wrong-pw-9913"
    with smtp_server(pki, "starttls") as (inbox, port):
        await send(email_settings(pki, port, smtp_password=wrong), dead())
    # One attempt, not retried (smtplib tries each mechanism the server offers: PLAIN, LOGIN).
    assert inbox.messages == [] and inbox.logins == [(USER.encode(), False)] * 2
    assert caplog.text.count("dead-task email via 127.0.0.1") == 1
    assert "refused the alert" in caplog.text
    assert "535" in caplog.text
    assert wrong not in caplog.text and PASSWORD not in caplog.text


async def test_a_server_certificate_from_another_ca_is_refused(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    with smtp_server(pki, "ssl") as (inbox, port):
        await send(email_settings(pki, port, "ssl", smtp_ca_file=str(pki.other_ca)), dead())
    assert inbox.messages == [] and inbox.logins == []
    assert "certificate was not accepted" in caplog.text


async def test_a_server_that_is_down_is_retried_within_the_bound(
    pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    started = time.monotonic()
    await send(email_settings(pki, free_port()), dead())
    # the three attempts and the last's 'giving up' (not a timeout) say it stayed within
    # the bound; the upper bound is only a backstop, generous for a loaded machine
    assert 2.0 <= time.monotonic() - started < 15.0
    assert caplog.text.count("dead-task email via 127.0.0.1") == 3
    assert "(attempt 3 of 3, giving up)" in caplog.text


async def test_a_server_that_never_answers_is_cut_off_at_the_deadline(pki: Pki) -> None:
    with silent_server() as (port, _):
        started = time.monotonic()
        sender = await send(email_settings(pki, port), dead(), deadline_s=0.8)
        elapsed = time.monotonic() - started
    assert sender.timed_out == 1 and 0.7 < elapsed < 15.0  # the server never answers


async def test_the_worker_exits_within_its_grace_while_the_smtp_server_hangs(
    settings: Settings, pki: Pki, monkeypatch: pytest.MonkeyPatch
) -> None:
    with silent_server() as (port, accepted):
        for name, value in {
            "LEDGERQ_SMTP_HOST": "127.0.0.1",
            "LEDGERQ_SMTP_PORT": str(port),
            "LEDGERQ_SMTP_CA_FILE": str(pki.ca),
            "LEDGERQ_SMTP_USER": USER,
            "LEDGERQ_SMTP_PASSWORD": PASSWORD,
            "LEDGERQ_ALERT_EMAIL_FROM": "ledgerq@example.com",
            "LEDGERQ_ALERT_EMAIL_TO": "ops@example.com",
        }.items():
            monkeypatch.setenv(name, value)
        code, output, took = await stop_worker_during_alert(settings, lambda: bool(accepted))
    assert code == 0, output
    # the grace and process teardown, not the server: the abandoning line below says
    # the grace ended the alert; the bound is generous for a loaded machine (5.6 s seen)
    assert took < 2 + 13, (took, output)
    assert "abandoning 1 dead-task alerts" in output
    assert PASSWORD not in output


# -- the callable channel ------------------------------------------------------------------


async def test_a_callable_named_by_its_dotted_path_gets_each_dead_task() -> None:
    alert_hooks.SEEN.clear()
    await send(Settings(alert_callable="tests.apps.alert_hooks:record"), dead(5))
    assert [row.id for row in alert_hooks.SEEN] == [5]


async def test_a_failing_callable_is_retried(caplog: pytest.LogCaptureFixture) -> None:
    alert_hooks.SEEN.clear()
    alert_hooks.FAILURES[0] = 2
    await send(Settings(alert_callable="tests.apps.alert_hooks.flaky"), dead(6))
    assert [row.id for row in alert_hooks.SEEN] == [6]
    assert caplog.text.count("the pager is away") == 2


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("tests.apps.no_such_module:record", "cannot be imported: ModuleNotFoundError"),
        ("tests.apps.alert_hooks:nothing", "has no 'nothing'"),
        ("tests.apps.alert_hooks:NOT_CALLABLE", "is not callable"),
    ],
)
def test_a_callable_that_cannot_be_used_is_a_config_error(path: str, expected: str) -> None:
    with pytest.raises(AlertConfigError, match=expected):
        alert_hook(Settings(alert_callable=path))


@pytest.mark.parametrize("command", [("reconcile",), ("worker", "--app", "tests.apps.slow_app")])
def test_a_service_with_an_unimportable_callable_exits_78_with_one_line(
    settings: Settings, command: tuple[str, ...]
) -> None:
    result = ledgerq(settings, *command, LEDGERQ_ALERT_CALLABLE="tests.apps.no_such:hook")
    assert result.returncode == 78, result.stderr
    assert result.stderr.startswith("ledgerq: ") and result.stderr.strip().count("\n") == 0
    assert "LEDGERQ_ALERT_CALLABLE 'tests.apps.no_such:hook' cannot be imported" in result.stderr


# -- settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"smtp_tls": "none"}, "does not send SMTP credentials unencrypted"),
        ({"alert_email_to": ()}, "Settings.alert_email_to is not"),
        ({"smtp_password": None}, "go together"),
        ({"smtp_tls": "tls1.3"}, "must be starttls, ssl or none"),
        ({"alert_email_to": ("not-an-address",)}, "comma-separated email addresses"),
    ],
)
def test_bad_email_settings_are_refused(pki: Pki, changes: dict[str, Any], expected: str) -> None:
    with pytest.raises(ConfigError, match=expected) as refused:
        email_settings(pki, 25, **changes)
    assert PASSWORD not in str(refused.value)


def test_the_password_is_never_shown_by_ledgerq_config(settings: Settings) -> None:
    result = ledgerq(settings, "config", "--json", LEDGERQ_SMTP_PASSWORD=PASSWORD)
    assert result.returncode == 0, result.stderr
    assert PASSWORD not in result.stdout and '"value": "***"' in result.stdout
