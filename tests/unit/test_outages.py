"""The rule every long-running loop shares (ledger/outages.py): which errors end a
loop, the back-off between attempts, and one log line per outage."""

from __future__ import annotations

import logging

import pytest

from ledgerq.core.errors import (
    ConfigError,
    PrivilegeMissingError,
    SchemaError,
    SchemaMissingError,
    ServiceUnavailableError,
    StorageError,
    TransientStorageError,
)
from ledgerq.ledger.outages import RECONNECT, Outage, ends_loop

log = logging.getLogger("tests.outages")


def test_only_a_setting_or_the_schema_ends_a_loop() -> None:
    for fatal in (
        ConfigError("LEDGERQ_X: bad"),
        SchemaError("run `ledgerq migrate`"),
        SchemaMissingError("relation missing"),
        PrivilegeMissingError("permission denied"),
    ):
        assert ends_loop(fatal), fatal
    for outage in (
        TransientStorageError("terminating connection due to administrator command"),
        ServiceUnavailableError("RabbitMQ", "amqp://x", "connection refused"),
        StorageError("bad data"),
        OSError("connection reset"),
        RuntimeError("a bug of ours"),
    ):
        assert not ends_loop(outage), outage


def test_the_back_off_grows_from_a_quarter_second_to_five() -> None:
    waits = [RECONNECT.delay_for(n) for n in range(1, 10)]
    assert 0.25 <= waits[0] <= 0.5
    assert 0.5 <= waits[1] <= 0.75
    assert all(w <= 5.0 for w in waits) and waits[-1] == 5.0


def test_one_line_when_an_outage_begins_and_one_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("test pass", log)
    caplog.set_level(logging.INFO, "tests.outages")
    outage.succeeded()  # no outage under way: nothing said
    waits = [outage.failed(TransientStorageError("server closed the connection")) for _ in range(5)]
    assert waits == sorted(waits)  # each longer than the last (jitter under a step)
    assert outage.ongoing and outage.attempts == 5
    outage.succeeded()
    outage.failed(OSError("connection refused"))
    outage.succeeded()
    lines = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert [level for level, _ in lines] == ["WARNING", "INFO", "WARNING", "INFO"]
    assert lines[0][1].startswith("test pass failed (server closed the connection); retrying")
    assert "after" in lines[1][1] and "(5 failed attempts)" in lines[1][1]
    assert outage.outages == 2 and not outage.ongoing
    assert all(r.exc_info is None for r in caplog.records)  # known errors: one line each


def test_an_unknown_error_is_logged_with_its_traceback_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage("test pass", log)
    for _ in range(3):
        try:
            raise RuntimeError("a bug of ours")
        except RuntimeError as exc:
            outage.failed(exc)
    [record] = caplog.records
    assert record.exc_info is not None and "a bug of ours" in record.getMessage()
