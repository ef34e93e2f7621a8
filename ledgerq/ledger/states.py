"""The task state machine: which transitions exist and which actor makes each.

Every transition in the ledger is a compare-and-set on ``(id, expected status,
epoch)`` (see ``queries.sql``); this module is the table those statements are
checked against, and what ``docs/state-machine.md`` draws.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    #: Enqueued with ``after``: waits for its dependencies (migration 0020).
    WAITING = "waiting"
    PENDING = "pending"
    PUBLISHED = "published"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL


LIVE = frozenset({Status.WAITING, Status.PENDING, Status.PUBLISHED, Status.RUNNING})
TERMINAL = frozenset({Status.SUCCEEDED, Status.DEAD, Status.CANCELLED})

# (from, to) -> the actor that makes the transition.
TRANSITIONS: dict[tuple[Status, Status], str] = {
    # The consumer may win the race against the relay's commit: it claims a row
    # the relay still holds (it waits on the row lock, then sees it published) or,
    # if the relay died after publishing, the row is still pending.
    (Status.PENDING, Status.RUNNING): "consumer (claim of a row the relay still holds)",
    (Status.PUBLISHED, Status.RUNNING): "consumer (claim, bumps epoch)",
    (Status.PENDING, Status.PUBLISHED): "relay (after the publisher confirm), or the "
    "reconciler standing in for a relay that is down (overdue rows)",
    (Status.PUBLISHED, Status.PUBLISHED): "reconciler (delivery stalled: published again)",
    (
        Status.RUNNING,
        Status.SUCCEEDED,
    ): "consumer (handler returned; same transaction as its writes)",
    (Status.RUNNING, Status.PENDING): "consumer (retry with backoff) or reconciler (lease "
    "expired: charged if the task ran alone, else released uncharged as a suspect)",
    (Status.RUNNING, Status.DEAD): "consumer or reconciler (attempts spent)",
    (Status.RUNNING, Status.CANCELLED): "consumer (the handler stopped after an operator's "
    "cancel request, or raised Cancelled; a failed attempt under a request is not retried)",
    # Dependencies (migration 0020: ledgerq_release, in the transaction of the
    # dependency's terminal write, or the reconciler's safety net).
    (Status.WAITING, Status.PENDING): "ledger (every dependency ended; all succeeded, or "
    "after_policy='always')",
    (Status.WAITING, Status.CANCELLED): "ledger (a dependency ended dead or cancelled), or "
    "operator (cancel)",
    # Operator interventions (ledger/operations.sql, `ledgerq tasks ...`).
    (Status.PENDING, Status.CANCELLED): "operator (cancel: the task never runs)",
    (Status.PUBLISHED, Status.CANCELLED): "operator (cancel: its queued message is skipped)",
    (Status.DEAD, Status.PENDING): "operator (retry from history: same id, fresh attempts)",
    (Status.CANCELLED, Status.PENDING): "operator (retry from history: same id, fresh attempts)",
    (Status.PENDING, Status.PENDING): "operator (reschedule, or retry: run a waiting task now)",
    (Status.PUBLISHED, Status.PENDING): "operator (reschedule, or a pause: epoch bumped, the "
    "queued message goes stale and the relay publishes it again when due), or the reconciler "
    "(its route lost every live subscriber: taken back into the ledger, epoch bumped)",
}


def can_transition(current: Status, target: Status) -> bool:
    return (current, target) in TRANSITIONS
