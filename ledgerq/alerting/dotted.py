"""The callable channel: ``LEDGERQ_ALERT_CALLABLE=package.module:function``.

The callable is imported when the channel is built, at service start: a path
that does not import, or names something that is not callable, is an
:class:`~ledgerq.alerting.alerts.AlertConfigError` (one line, exit 78), never a
surprise at the first dead task. ``package.module.function`` works too (the
last dot then splits module from attribute). It is called with the
:class:`~ledgerq.ledger.model.Finished` row of each dead task: a coroutine
function on the service's loop, any other callable on a daemon thread (so one
that blocks is abandoned at the alert's deadline). Whatever it raises is a
failure, retried like any channel's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ledgerq.alerting.alerts import AlertConfigError, Channel, call_hook
from ledgerq.ledger.model import Finished


def load_callable(path: str) -> Callable[[Finished], Any]:
    module_name, sep, attribute = path.partition(":")
    if not sep:
        module_name, _, attribute = path.rpartition(".")
    try:
        target: Any = importlib.import_module(module_name)
    except Exception as exc:  # ImportError, or whatever the module raised as it loaded
        raise AlertConfigError(
            f"LEDGERQ_ALERT_CALLABLE {path!r} cannot be imported: {type(exc).__name__}: {exc}"
        ) from None
    try:
        for part in attribute.split("."):
            target = getattr(target, part)
    except AttributeError:
        raise AlertConfigError(
            f"LEDGERQ_ALERT_CALLABLE {path!r}: module {module_name!r} has no {attribute!r}"
        ) from None
    if not callable(target):
        raise AlertConfigError(f"LEDGERQ_ALERT_CALLABLE {path!r} is not callable")
    return target  # type: ignore[no-any-return]


def callable_channel(path: str) -> Channel:
    """The channel that calls the function at ``path`` (imported now)."""
    hook = load_callable(path)

    async def call(row: Finished) -> None:
        await call_hook(hook, row)

    return Channel(f"alert callable {path}", call)
