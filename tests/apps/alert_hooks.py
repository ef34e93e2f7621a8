"""Dead-task alert callables for LEDGERQ_ALERT_CALLABLE in the tests."""

from __future__ import annotations

from ledgerq.ledger.model import Finished

#: What :func:`record` and :func:`flaky` received, in order.
SEEN: list[Finished] = []
#: How many more calls :func:`flaky` fails before it records.
FAILURES = [0]


def record(row: Finished) -> None:
    SEEN.append(row)


async def flaky(row: Finished) -> None:
    if FAILURES[0] > 0:
        FAILURES[0] -= 1
        raise ConnectionError("the pager is away")
    SEEN.append(row)


NOT_CALLABLE = 42
