"""What an operator action did: :class:`Report`, filled by the action's plan
(:func:`~ledgerq.ledger.actions.walk`) batch by batch and read by its caller (the
CLI's progress, the admin API, the dashboard). A module of its own so that the
seam's keyword types (:mod:`ledgerq.ledger.options`) can name it without
importing the plans that fill it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Report:
    """What an action did (or, in a dry run, would do): ``matched`` tasks, of which
    ``changed`` were changed and ``skipped`` were not, ``reasons`` counting why.
    ``asked_to_stop``: of the changed, the running tasks a cancel asked to stop
    (they end ``cancelled`` when their handler returns). ``cascaded``: the live
    descendants a cascading cancel changed (not in ``matched``/``changed``; the
    running ones are in ``asked_to_stop``)."""

    action: str
    dry_run: bool = False
    matched: int = 0
    changed: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)
    audit_id: int | None = None
    asked_to_stop: int = 0
    cascaded: int = 0

    def skip(self, why: str, n: int = 1) -> None:
        self.skipped += n
        self.reasons[why] = self.reasons.get(why, 0) + n

    def to_json(self) -> dict[str, Any]:
        return {
            "matched": self.matched,
            "changed": self.changed,
            "skipped": self.skipped,
            "reasons": dict(sorted(self.reasons.items())),
            "dry_run": self.dry_run,
            "audit_id": self.audit_id,
            "asked_to_stop": self.asked_to_stop,
            "cascaded": self.cascaded,
        }
