"""The dead-task alert channels, one module each: :mod:`.webhook` (a JSON POST),
:mod:`.email` (SMTP, with STARTTLS or SMTPS and a login), :mod:`.dotted` (any
callable named ``package.module:function``).

Each module turns its settings into a :class:`~ledgerq.alerting.alerts.Channel`,
checking them at once (a channel that cannot work is an
:class:`~ledgerq.alerting.alerts.AlertConfigError` at service start, never a
surprise at the first dead task). Which channels a service gets is decided in
one place, the composition root (:func:`ledgerq.compose.alert_hook`); the
retries, the deadline and the concurrency are :mod:`ledgerq.alerting.alerts`'.
"""
