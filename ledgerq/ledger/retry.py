"""Retry schedules, stored on the task row as JSON and evaluated with tenacity.

Three shapes cover what Celery, River and Oban users ask for:

* ``RetryPolicy.fixed(60)`` - the same wait after every failure;
* ``RetryPolicy.exponential(base=1, maximum=3600, multiplier=2)`` -
  ``base * multiplier**(n-1)`` plus up to ``base`` seconds of jitter, capped at
  ``maximum`` (the default policy, with multiplier 2; Celery's
  ``retry_backoff`` doubles likewise, Oban's default backoff grows by 2 too);
* ``RetryPolicy.schedule(60, 300, 1200)`` - an explicit list; past its end the
  last entry repeats.

The policy decides *when*; ``max_attempts`` on the task decides *whether*.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tenacity import (
    RetryCallState,
    Retrying,
    wait_chain,
    wait_exponential,
    wait_fixed,
)
from tenacity.wait import wait_base

from ledgerq.core.errors import InvalidRetryPolicyError

# The jitter's own generator: the module-level one is shared with whatever else
# runs in the process (a test framework replaying its draws, a caller's seeded
# simulation), and a retry delay must neither disturb nor depend on it.
_JITTER = random.Random()


class _Jitter(wait_base):
    """Up to ``most`` seconds, uniformly, from the module's own generator."""

    def __init__(self, most: float) -> None:
        self.most = most

    def __call__(self, retry_state: RetryCallState) -> float:
        return _JITTER.random() * self.most


PolicyKind = Literal["fixed", "exponential", "schedule"]
_KINDS: tuple[PolicyKind, ...] = ("fixed", "exponential", "schedule")
MAX_DELAY_S = 365 * 24 * 3600.0


def _seconds(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRetryPolicyError(f"retry {what} must be a number of seconds, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or number < 0 or number > MAX_DELAY_S:
        raise InvalidRetryPolicyError(
            f"retry {what} must be between 0 and {MAX_DELAY_S:.0f} seconds, got {value!r}"
        )
    return number


MAX_MULTIPLIER = 100.0


def _multiplier(value: object) -> float:
    """A backoff's growth factor: 1 (a constant wait) to 100."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidRetryPolicyError(f"retry multiplier must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or not 1.0 <= number <= MAX_MULTIPLIER:
        raise InvalidRetryPolicyError(
            f"retry multiplier must be between 1 and {MAX_MULTIPLIER:.0f}, got {value!r}"
        )
    return number


@dataclass(frozen=True)
class RetryPolicy:
    kind: PolicyKind
    delay: float = 0.0
    base: float = 1.0
    maximum: float = 3600.0
    delays: tuple[float, ...] = field(default=())
    multiplier: float = 2.0

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise InvalidRetryPolicyError(
                f"retry policy kind must be one of {', '.join(_KINDS)}, got {self.kind!r}"
            )
        _seconds(self.delay, "delay")
        _seconds(self.base, "base")
        _seconds(self.maximum, "maximum")
        for d in self.delays:
            _seconds(d, "schedule entry")
        _multiplier(self.multiplier)
        if self.kind == "schedule" and not self.delays:
            raise InvalidRetryPolicyError("a retry schedule needs at least one delay")

    # -- constructors -----------------------------------------------------------
    @classmethod
    def fixed(cls, seconds: float) -> RetryPolicy:
        return cls("fixed", delay=_seconds(seconds, "delay"))

    @classmethod
    def exponential(
        cls, base: float = 1.0, maximum: float = 3600.0, multiplier: float = 2.0
    ) -> RetryPolicy:
        return cls(
            "exponential",
            base=_seconds(base, "base"),
            maximum=_seconds(maximum, "maximum"),
            multiplier=_multiplier(multiplier),
        )

    @classmethod
    def schedule(cls, *delays: float) -> RetryPolicy:
        return cls("schedule", delays=tuple(_seconds(d, "schedule entry") for d in delays))

    @classmethod
    def coerce(cls, value: RetryPolicy | Sequence[float] | Mapping[str, Any] | None) -> RetryPolicy:
        """Accept a policy, a list of delays, or the JSON form; ``None`` is the default."""
        if value is None:
            return DEFAULT_POLICY
        if isinstance(value, RetryPolicy):
            return value
        if isinstance(value, Mapping):
            return cls.from_json(value)
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return cls.schedule(*value)
        raise InvalidRetryPolicyError(f"cannot use {value!r} as a retry policy")

    # -- JSON form stored on the row ---------------------------------------------
    def to_json(self) -> dict[str, Any]:
        if self.kind == "fixed":
            return {"kind": "fixed", "delay": self.delay}
        if self.kind == "exponential":
            shape: dict[str, Any] = {"kind": "exponential", "base": self.base}
            shape["maximum"] = self.maximum
            if self.multiplier != 2.0:  # rows written before the option read the same
                shape["multiplier"] = self.multiplier
            return shape
        return {"kind": "schedule", "delays": list(self.delays)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> RetryPolicy:
        if data is None:
            return DEFAULT_POLICY
        kind = data.get("kind")
        if kind == "fixed":
            return cls.fixed(data.get("delay", 0.0))
        if kind == "exponential":
            return cls.exponential(
                data.get("base", 1.0), data.get("maximum", 3600.0), data.get("multiplier", 2.0)
            )
        if kind == "schedule":
            delays = data.get("delays")
            if not isinstance(delays, list):
                raise InvalidRetryPolicyError("a retry schedule needs a list of delays")
            return cls.schedule(*delays)
        raise InvalidRetryPolicyError(f"unknown retry policy {dict(data)!r}")

    # -- evaluation ---------------------------------------------------------------
    def wait(self) -> wait_base:
        """The tenacity wait strategy this policy stands for."""
        if self.kind == "fixed":
            return wait_fixed(self.delay)
        if self.kind == "exponential":
            # tenacity's names: its ``multiplier`` is our base delay, its
            # ``exp_base`` our multiplier.
            capped: wait_base = wait_exponential(
                multiplier=self.base, max=self.maximum, exp_base=self.multiplier
            )
            return capped + _Jitter(self.base)
        return wait_chain(*(wait_fixed(d) for d in self.delays))

    def delay_for(self, attempt: int) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        state = RetryCallState(retry_object=Retrying(), fn=None, args=(), kwargs={})
        state.attempt_number = max(1, attempt)
        return min(float(self.wait()(state)), self.cap)

    @property
    def cap(self) -> float:
        return self.maximum if self.kind == "exponential" else MAX_DELAY_S


DEFAULT_POLICY = RetryPolicy.exponential(base=1.0, maximum=3600.0)
