"""Every service says at start when autovacuum will not clean the hot table.

Without autovacuum every claim and finish leaves a dead tuple in ledgerq_tasks,
and under churn the table grows until someone runs VACUUM by hand. The table's
own storage parameter turns autovacuum off whatever the server says, so these
tests set it to get a known "off" on any server, and compare the ledger's
answer with the server's own setting for the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from ledgerq.compose import open_reconciler, open_relay
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from tests.harness import db

TABLE_OFF = "ledgerq_tasks has autovacuum_enabled = false"


@pytest.fixture
def table_autovacuum_off(settings: Settings) -> Iterator[Settings]:
    with db(settings) as conn:
        conn.execute("ALTER TABLE ledgerq_tasks SET (autovacuum_enabled = false)")
    try:
        yield settings
    finally:
        with db(settings) as conn:
            conn.execute("ALTER TABLE ledgerq_tasks RESET (autovacuum_enabled)")


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "the hot table will bloat" in r.getMessage()
    ]


async def test_the_ledger_reports_the_servers_own_autovacuum_setting(
    settings: Settings, ledger: PgLedger
) -> None:
    with db(settings) as conn:
        row = conn.execute("SHOW autovacuum").fetchone()
    assert row is not None
    reasons = await ledger.autovacuum_off()
    assert ("the server runs with autovacuum = off" in reasons) == (row[0] != "on")
    assert TABLE_OFF not in reasons


async def test_relay_and_reconciler_warn_at_start_when_the_table_opts_out(
    table_autovacuum_off: Settings, ledger: PgLedger, caplog: pytest.LogCaptureFixture
) -> None:
    assert TABLE_OFF in await ledger.autovacuum_off()
    with caplog.at_level(logging.WARNING, logger="ledgerq"):
        async with open_relay(table_autovacuum_off):
            pass
        relay_warnings = _warnings(caplog)
        caplog.clear()
        async with open_reconciler(table_autovacuum_off):
            pass
        reconciler_warnings = _warnings(caplog)
    for warnings in (relay_warnings, reconciler_warnings):
        assert any(TABLE_OFF in w and "turn autovacuum on" in w for w in warnings), warnings


async def test_no_warning_about_the_table_once_it_opts_back_in(
    settings: Settings, ledger: PgLedger, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="ledgerq"):
        async with open_relay(settings):
            pass
    assert not [w for w in _warnings(caplog) if TABLE_OFF in w]
    server_off = "the server runs with autovacuum = off" in await ledger.autovacuum_off()
    assert bool(_warnings(caplog)) == server_off
