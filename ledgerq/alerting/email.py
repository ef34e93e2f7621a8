"""The email channel: one message per dead task, over SMTP.

Settings (``LEDGERQ_SMTP_*``, ``LEDGERQ_ALERT_EMAIL_FROM`` / ``_TO``, checked in
:mod:`ledgerq.core.config`): the host and port, the TLS mode, an optional CA
file, an optional login, the sender and the recipients. TLS modes:

- ``starttls`` (the default; port 587): plain TCP, then STARTTLS, which must be
  offered (a server that does not offer it is refused for good: ledgerq never
  falls back to sending in clear);
- ``ssl`` (SMTPS; port 465): TLS from the first byte;
- ``none`` (port 25): no TLS, and then no login either (the settings refuse a
  user with ``none``: credentials never cross the network in clear).

TLS verifies the server's certificate and host name, against
``LEDGERQ_SMTP_CA_FILE`` or else the system's CAs; there is no switch to turn
that off. The password is handed to ``smtplib`` and to nothing else: it is not
in the channel's name, its repr or any log line (the CLI's log filter also masks
it, :meth:`~ledgerq.core.config.Settings.passwords`).

Why the standard library's ``smtplib`` on a daemon thread rather than
aiosmtplib: no new runtime dependency for one message per dead task, and the
alert machinery already runs blocking hooks on daemon threads that are
abandoned at the alert's deadline and never hold the process open
(:func:`~ledgerq.alerting.alerts.on_daemon_thread`); every socket operation also
has the deadline as its timeout, so an abandoned thread ends soon after.

Failures: a refused login, sender or recipients (5xx) are refused for good; a
connection that fails, a server that hangs up or a temporary 4xx are retried
(:func:`~ledgerq.alerting.alerts.send_with_retries`).
"""

from __future__ import annotations

import smtplib
import ssl
from dataclasses import dataclass, field
from email.message import EmailMessage

from ledgerq.alerting.alerts import ALERT_DEADLINE_S, AlertRefused, Channel, on_daemon_thread
from ledgerq.ledger.model import Finished

DEFAULT_PORTS = {"ssl": 465, "starttls": 587, "none": 25}


@dataclass(frozen=True)
class SmtpConfig:
    host: str
    sender: str
    recipients: tuple[str, ...]
    port: int = 0
    tls: str = "starttls"
    ca_file: str | None = None
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    timeout_s: float = ALERT_DEADLINE_S

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port or DEFAULT_PORTS[self.tls]}"


def message_for(config: SmtpConfig, row: Finished) -> EmailMessage:
    message = EmailMessage()
    message["From"] = config.sender
    message["To"] = ", ".join(config.recipients)
    message["Subject"] = (
        f"[ledgerq] task {row.id} ({row.kind}) is dead after {row.attempts} attempts"
    )
    message.set_content(
        f"Task {row.id} of kind {row.kind} ended dead after {row.attempts} attempts.\n\n"
        f"Last error:\n{row.last_error or 'no error recorded'}\n\n"
        f"See it with: ledgerq show {row.id}\n"
    )
    return message


def _connect(config: SmtpConfig, context: ssl.SSLContext) -> smtplib.SMTP:
    port = config.port or DEFAULT_PORTS[config.tls]
    if config.tls == "ssl":
        return smtplib.SMTP_SSL(config.host, port, timeout=config.timeout_s, context=context)
    smtp = smtplib.SMTP(config.host, port, timeout=config.timeout_s)
    try:
        if config.tls == "starttls":
            smtp.ehlo()
            if not smtp.has_extn("starttls"):
                raise AlertRefused("the server does not offer STARTTLS; not sending in clear")
            smtp.starttls(context=context)
    except BaseException:
        smtp.close()
        raise
    return smtp


def send_email(config: SmtpConfig, message: EmailMessage) -> None:
    """Blocking: connect, TLS, log in, send, quit."""
    context = ssl.create_default_context(cafile=config.ca_file)
    try:
        with _connect(config, context) as smtp:
            if config.user and config.password:
                smtp.login(config.user, config.password)
            smtp.send_message(message, config.sender, list(config.recipients))
    except (smtplib.SMTPAuthenticationError, smtplib.SMTPNotSupportedError) as exc:
        raise AlertRefused(_smtp_reason(exc)) from None
    except smtplib.SMTPRecipientsRefused as exc:
        raise AlertRefused(f"recipients refused: {', '.join(sorted(exc.recipients))}") from None
    except smtplib.SMTPResponseException as exc:
        if exc.smtp_code >= 500:
            raise AlertRefused(_smtp_reason(exc)) from None
        raise OSError(_smtp_reason(exc)) from None
    except ssl.SSLCertVerificationError as exc:
        raise AlertRefused(f"the server's certificate was not accepted: {exc.verify_message}")


def _smtp_reason(exc: Exception) -> str:
    if isinstance(exc, smtplib.SMTPResponseException):
        text = (
            exc.smtp_error.decode("utf-8", "replace")
            if isinstance(exc.smtp_error, bytes)
            else str(exc.smtp_error)
        )
        return f"{exc.smtp_code} {text}".strip()
    return str(exc) or type(exc).__name__


def email_channel(config: SmtpConfig) -> Channel:
    """The channel that emails each dead task to the recipients."""

    async def send(row: Finished) -> None:
        await on_daemon_thread(send_email, config, message_for(config, row))

    return Channel(f"dead-task email via {config.address}", send)
