"""Purge finished tasks now, and read the effective configuration: :func:`purge`,
:func:`config` (and their async twins). What ``ledgerq purge`` and ``ledgerq
config`` run.

:func:`purge` removes finished tasks (``succeeded``, ``dead``, ``cancelled``)
that finished before a cutoff: ``older_than`` for every status given, else each
status's retention (``LEDGERQ_RETENTION_<STATUS>_DAYS``; kept-forever statuses
are left out). The cutoffs are read on the database's clock. It drops the
wholly expired day partitions, then deletes the rest in batches, each its own
short transaction, so it never holds a long lock; ``progress`` hears how many
rows each step removed. Live tasks are never touched, whatever their age. The
count (``matched``) is taken first; rows that finish meanwhile and fall under
a cutoff are removed too, so ``removed`` may exceed it. A split ledger is
refused (one line, :class:`~ledgerq.core.errors.ConfigError`), as at the CLI.

:func:`config` connects to nothing: the settings, where each came from, secrets
masked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from datetime import timedelta

from ledgerq.admin.reports import ConfigEntry, PurgeResult
from ledgerq.admin.targets import APPLICATION_NAME, Target, settings_of, sync_twin
from ledgerq.core.errors import InvalidFilterError
from ledgerq.core.settings_table import SETTINGS

#: The statuses a purge may remove (the terminal ones).
FINISHED = ("succeeded", "dead", "cancelled")

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400, "w": 7 * 86_400}


def parse_duration(text: str, option: str = "older_than") -> timedelta:
    """``30d``, ``12h``, ``90m``, ``45s``, ``2w`` (or ``1d12h``);
    :class:`InvalidFilterError` naming ``option`` otherwise."""
    cleaned = text.strip().lower()
    parts = _DURATION.findall(cleaned)
    if not cleaned or _DURATION.sub("", cleaned).strip():
        raise InvalidFilterError(
            f"{option}: cannot read {text!r} as a duration (use 30d, 12h, 90m)"
        )
    return _age(timedelta(seconds=sum(float(n) * _UNITS[unit] for n, unit in parts)), option, text)


def _age(age: timedelta, option: str, shown: object) -> timedelta:
    if not timedelta(0) < age <= timedelta(days=100 * 365):
        raise InvalidFilterError(
            f"{option} must be more than 0 and at most 100 years, got {shown!r}"
        )
    return age


def finished_statuses(given: Iterable[str], option: str = "statuses") -> tuple[str, ...]:
    """The statuses a purge removes (default: all three), or an error naming ``option``."""
    chosen = tuple(dict.fromkeys(given))
    unknown = [s for s in chosen if s not in FINISHED]
    if unknown:
        raise InvalidFilterError(
            f"{option}: {unknown[0]!r} is not a finished status (use {', '.join(FINISHED)}; "
            "live tasks are never purged)"
        )
    return chosen or FINISHED


async def apurge(
    target: Target,
    older_than: timedelta | str | None = None,
    statuses: Iterable[str] = (),
    *,
    dry_run: bool = False,
    progress: Callable[[int], None] | None = None,
) -> PurgeResult:
    """Remove finished tasks older than their retention or ``older_than`` (a
    ``timedelta`` or ``"30d"``); ``dry_run`` only counts. See the module."""
    from ledgerq.compose import retention_config
    from ledgerq.compose.retention import open_retention_ledger
    from ledgerq.relay.retention import Retention

    if isinstance(older_than, str):
        age: timedelta | None = parse_duration(older_than)
    else:
        age = None if older_than is None else _age(older_than, "older_than", older_than)
    chosen = finished_statuses(statuses)
    settings = settings_of(target)
    async with open_retention_ledger(settings, APPLICATION_NAME, pool_size=1) as ledger:
        retention = Retention(ledger, retention_config(settings))
        cutoffs = await retention.cutoffs(age, chosen)
        matched = await ledger.count_purgeable(cutoffs) if cutoffs else {}
        if dry_run:
            return PurgeResult(True, cutoffs, matched)
        started = time.perf_counter()
        counts = await retention.purge(cutoffs, progress or (lambda n: None))
    return PurgeResult(
        False,
        cutoffs,
        matched,
        removed=counts.removed,
        dropped=counts.dropped,
        dropped_rows=counts.dropped_rows,
        deleted_rows=counts.deleted_rows,
        counts=counts.as_dict(),
        elapsed=timedelta(seconds=time.perf_counter() - started),
    )


purge = sync_twin(apurge)


def config(target: Target) -> dict[str, ConfigEntry]:
    """Each setting by field name: its value (URLs masked), its source, its
    environment variable and its flag. Connects to nothing."""
    settings = settings_of(target)
    values = settings.masked()
    return {
        s.field: ConfigEntry(
            field=s.field,
            value=values[s.field],
            source=settings.sources.get(s.field, "default"),
            env=s.env,
            flag=s.flag,
        )
        for s in SETTINGS
    }


async def aconfig(target: Target) -> dict[str, ConfigEntry]:
    """:func:`config` (it does no I/O), for symmetry in async code."""
    return config(target)
