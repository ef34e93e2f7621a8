"""``@task(lease=True)``: registered as lease mode; not with ``group_commit``."""

from __future__ import annotations

from typing import Any

import pytest

from ledgerq import AsyncTaskContext, Registry, RegistryError


def test_lease_mode_is_an_option_of_the_kind_and_excludes_group_commit() -> None:
    registry = Registry()

    @registry.task("export", lease=True)
    async def export(payload: Any, ctx: AsyncTaskContext) -> None:
        return None

    handler = registry.get("export")
    assert handler is not None and handler.lease
    with pytest.raises(RegistryError, match="lease=True is for long tasks"):
        registry.task("both", lease=True, group_commit=True)
