"""What a long-running loop does when a pass fails: the one rule every loop shares.

The relay's loop, the reconciler's loop (``ledgerq reconcile --every``), the
periodic enqueuer and the dashboard's gauge refresh all run a pass, wait, and
run the next. When a pass fails:

* **A configuration or schema error ends the loop** (:func:`ends_loop`): a
  :class:`~ledgerq.core.errors.ConfigError` (a setting ledgerq cannot use, a
  broker queue of another type) or a :class:`~ledgerq.core.errors.SchemaError`
  (the tables gone or outdated, a privilege missing). Retrying brings no table
  back and fixes no setting: the service stops with that one line and its exit
  code (78, ``ledgerq.cli.group``).
* **Anything else is an outage, lived through**: a lost or terminated
  connection, a database restarting or refusing connections, a pool with no
  connection to give, a statement timeout, a broker away. The loop waits with
  back-off (:data:`RECONNECT`: exponential with jitter, from a quarter of a
  second up to 5 s, so a pass runs within about 5 s of the service coming back)
  and tries again, for as long as it takes. Every attempt opens fresh
  connections: SQLAlchemy discarded the dead ones when their statement failed.
* **One line per outage** (:class:`Outage`): a warning when the first attempt
  fails, with the error's first line (and its traceback if it is not a known
  connection error, since that may be a bug of ours); the attempts after it are
  counted, not logged; when a pass succeeds again an INFO line says how long
  the outage lasted and how many attempts failed.

A single pass (``ledgerq reconcile`` without ``--every``, a cron job) is not a
loop: it fails with its error (exit 69 for a service that cannot be reached),
and the next cron run is its retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field

from ledgerq.core.errors import ConfigError, LedgerqError, SchemaError, first_line
from ledgerq.ledger.retry import RetryPolicy

#: The back-off between a loop's attempts during an outage (evaluated by tenacity).
RECONNECT = RetryPolicy.exponential(base=0.25, maximum=5.0)


def ends_loop(exc: BaseException) -> bool:
    """Whether ``exc`` ends a long-running loop instead of being retried: a setting
    or the schema to fix (see the module docstring)."""
    return isinstance(exc, ConfigError | SchemaError)


def _known(exc: BaseException) -> bool:
    """An error that explains itself in one line: one of ours (a transient storage
    error, a service unavailable, a broker connection lost) or a socket's."""
    return isinstance(exc, LedgerqError | OSError | TimeoutError)


@dataclass
class Outage:
    """The failures of one loop, logged once per outage (see the module docstring).

    ``what`` names the pass in the log lines ("reconciler pass", "relay batch")."""

    what: str
    log: logging.Logger
    policy: RetryPolicy = RECONNECT
    #: Failed attempts of the outage under way (0: none under way).
    attempts: int = 0
    #: Outages lived through so far (for tests and health).
    outages: int = 0
    _began: float = field(default=0.0, repr=False)

    @property
    def ongoing(self) -> bool:
        return self.attempts > 0

    def failed(self, exc: BaseException, *, expected: bool = False) -> float:
        """Count a failed attempt (logged if it is the outage's first); return the
        seconds to wait before the next. The caller has checked :func:`ends_loop`;
        ``expected``: it knows ``exc`` for a connection error (logged without its
        traceback, as ledgerq's own errors are)."""
        self.attempts += 1
        if self.attempts == 1:
            self.outages += 1
            self._began = time.monotonic()
            self.log.warning(
                "%s failed (%s); retrying with back-off until it succeeds (logged again only then)",
                self.what,
                first_line(exc),
                exc_info=None if expected or _known(exc) else exc,
            )
        return self.policy.delay_for(self.attempts)

    def succeeded(self) -> None:
        """A pass worked: end the outage under way, if any, with one line."""
        if self.attempts:
            self.log.info(
                "%s works again after %.1f s (%d failed attempts)",
                self.what,
                time.monotonic() - self._began,
                self.attempts,
            )
            self.attempts = 0


async def pause(stop: asyncio.Event, seconds: float) -> None:
    """Wait ``seconds``, or less if ``stop`` is set meanwhile."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), max(0.0, seconds))
