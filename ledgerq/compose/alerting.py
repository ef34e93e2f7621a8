"""The dead-task alert that a worker or a reconciler is built with: the log line,
plus each channel the settings configure (webhook, email, a dotted callable).
Each channel is checked when it is built, so a bad one stops the service at
start with one line (an :class:`AlertConfigError`, exit 78), never at the first
dead task."""

from __future__ import annotations

from ledgerq.alerting.alerts import AlertHook, Channel, fan_out
from ledgerq.alerting.dotted import callable_channel
from ledgerq.alerting.email import SmtpConfig, email_channel
from ledgerq.alerting.webhook import webhook_channel
from ledgerq.core.config import Settings


def alert_hook(settings: Settings) -> AlertHook:
    """The dead-task alert of a worker or reconciler: the log line, plus each channel
    the settings configure (checked now: a bad one is an AlertConfigError, exit 78)."""
    channels: list[Channel] = []
    if settings.alert_webhook:
        channels.append(webhook_channel(settings.alert_webhook))
    if settings.smtp_host and settings.alert_email_from:
        smtp = SmtpConfig(
            host=settings.smtp_host,
            sender=settings.alert_email_from,
            recipients=settings.alert_email_to,
            port=settings.smtp_port,
            tls=settings.smtp_tls,
            ca_file=settings.smtp_ca_file,
            user=settings.smtp_user,
            password=settings.smtp_password,
        )
        channels.append(email_channel(smtp))
    if settings.alert_callable:
        channels.append(callable_channel(settings.alert_callable))
    return fan_out(channels)
