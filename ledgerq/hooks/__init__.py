"""The cross-cutting observers of a service, in one object: :class:`Hooks`.

A worker (and whatever else takes them) is handed one :class:`Hooks` instead
of three constructor arguments; the composition root builds it (the alert hook
from the settings' channels, the probe from ``LEDGERQ_CRASH_AT``, the observer
from ``--metrics-port``) and each part takes the hook it calls.

Contract of each hook (they are called on the service's event loop):

* ``alert`` hears of each task that ended ``dead``, after its status committed,
  through an :class:`~ledgerq.alerting.alerts.AlertSender` (a few at a time, each
  within its deadline), so a slow or failing channel never holds a claim, a
  finish or the reconciler's lock;
* ``probe`` is called at the named points of :mod:`ledgerq.hooks.probes`; in
  production it does nothing, in the fault suite it SIGKILLs the process there;
* ``observer`` receives counts after the fact (:mod:`ledgerq.ledger.observer`):
  it must be quick and must not raise.

None of them changes what the service does; :data:`NO_HOOKS` is all three doing
nothing but the alert's log line.
"""

from __future__ import annotations

from dataclasses import dataclass

from ledgerq.alerting.alerts import AlertHook, log_alert
from ledgerq.hooks.probes import Probe, no_probe
from ledgerq.ledger.observer import NO_OBSERVER, Observer


@dataclass(frozen=True)
class Hooks:
    alert: AlertHook = log_alert
    probe: Probe = no_probe
    observer: Observer = NO_OBSERVER


#: The hooks of a service built without alerting channels, faults or metrics.
NO_HOOKS = Hooks()
