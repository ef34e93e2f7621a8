"""pytest fixtures over :mod:`ledgerq.testing`, bound to the suite's own database.

Enable it in a ``conftest.py`` and name the database with a fixture
``ledgerq_bind`` (an ``Engine``, or anything :func:`~ledgerq.testing.drain` takes)::

    pytest_plugins = ["ledgerq.testing.pytest_plugin"]

    @pytest.fixture
    def ledgerq_bind(engine):           # your test database's Engine
        return engine

Then a test takes:

- ``ledgerq_drain``: :func:`~ledgerq.testing.drain` bound to it
  (``ledgerq_drain(kinds=["send_receipt"])``);
- ``ledgerq_enqueued``: :func:`~ledgerq.testing.enqueued` bound to it;
- ``ledgerq_advance``: :func:`~ledgerq.testing.advance` bound to it;
- ``ledgerq_clean``: the ledger emptied before the test (:func:`~ledgerq.testing.reset`).

They are sync; an async test awaits :func:`~ledgerq.testing.adrain` and the
other ``a``-functions itself.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import pytest

from ledgerq.testing.drain import DrainResult, drain
from ledgerq.testing.tasks import EnqueuedTask, advance, enqueued, reset


@pytest.fixture
def ledgerq_bind() -> Any:
    """Override it: the test database (an ``Engine``, or any bind drain takes)."""
    raise pytest.UsageError(
        "ledgerq.testing.pytest_plugin needs a fixture named ledgerq_bind that returns "
        "your test database's Engine (or any bind ledgerq.testing.drain takes)"
    )


@pytest.fixture
def ledgerq_drain(ledgerq_bind: Any) -> Callable[..., DrainResult]:
    """``drain(ledgerq_bind, **options)``."""
    return partial(drain, ledgerq_bind)


@pytest.fixture
def ledgerq_enqueued(ledgerq_bind: Any) -> Callable[..., list[EnqueuedTask]]:
    """``enqueued(ledgerq_bind, kind=None, **options)``."""
    return partial(enqueued, ledgerq_bind)


@pytest.fixture
def ledgerq_advance(ledgerq_bind: Any) -> Callable[..., int]:
    """``advance(ledgerq_bind, seconds, **options)``."""
    return partial(advance, ledgerq_bind)


@pytest.fixture
def ledgerq_clean(ledgerq_bind: Any) -> None:
    """The ledger emptied before the test (every task, its history and audit)."""
    reset(ledgerq_bind)
