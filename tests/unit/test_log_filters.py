"""The CLI's log filters: a pooled connection the database lost is one WARNING line;
every other failed reset keeps its traceback (ledgerq/cli/group.py)."""

from __future__ import annotations

import logging
import sys

import pymysql

from ledgerq.cli.group import LostPooledConnections


def _record(name: str, error: BaseException) -> logging.LogRecord:
    try:
        raise error
    except type(error):
        info = sys.exc_info()
    return logging.LogRecord(
        name, logging.ERROR, __file__, 1, "Exception during reset or similar", None, info
    )


def test_a_lost_pooled_connection_is_one_warning_line() -> None:
    lost = pymysql.err.OperationalError(2013, "Lost connection to MySQL server during query")
    record = _record("sqlalchemy.pool.impl.QueuePool", lost)
    assert LostPooledConnections().filter(record)
    assert (record.levelno, record.levelname, record.exc_info) == (logging.WARNING, "WARNING", None)
    assert record.getMessage() == (
        "a pooled database connection was lost ((2013, 'Lost connection to MySQL server "
        "during query')); discarded"
    )


def test_any_other_failed_reset_keeps_its_traceback() -> None:
    record = _record("sqlalchemy.pool.impl.QueuePool", ValueError("a bug of ours"))
    assert LostPooledConnections().filter(record)
    assert record.levelno == logging.ERROR and record.exc_info is not None
    elsewhere = _record("ledgerq.worker", pymysql.err.OperationalError(2013, "lost"))
    assert LostPooledConnections().filter(elsewhere)
    assert elsewhere.levelno == logging.ERROR and elsewhere.exc_info is not None
