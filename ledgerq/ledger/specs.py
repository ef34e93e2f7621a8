"""What a producer asks for: :class:`TaskSpec` (one task, validated when built),
its options (:class:`EnqueueOptions`, for typing ``**options``), and the rows
document the batch insert sends (:func:`rows_document`, :func:`chunks`).

Values only: nothing here runs a statement (:mod:`ledgerq.ledger.producer` puts
the specs in the ledger through the storage seam), so the seam's protocols and
its implementations take the spec from here and never from the producer.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime, timedelta
from typing import Any, TypedDict

from ledgerq.core.errors import (
    InvalidTaskError,
)
from ledgerq.ledger import tracing
from ledgerq.ledger import validation as v
from ledgerq.ledger.after import After, check_after
from ledgerq.ledger.retry import RetryPolicy
from ledgerq.ledger.sharding import deployment_count, shard_of

RetryLike = RetryPolicy | Sequence[float] | Mapping[str, Any] | None


class EnqueueOptions(TypedDict, total=False):
    """The options ``enqueue`` takes after kind and payload (the fields of
    :class:`TaskSpec`), for typing ``**options`` (``TaskHandle.enqueue``)."""

    queue: str
    business_key: str | None
    unique: bool
    once: bool
    run_at: datetime | None
    delay: float | timedelta | None
    priority: int
    max_attempts: int | None
    retry: RetryLike
    timeout: float | timedelta | None
    shard: int | None
    shard_key: str | None
    parent_id: int | None
    ordering_key: str | None
    expires: float | timedelta | datetime | None
    tags: Sequence[str] | None
    after: Sequence[int] | None
    after_policy: str


#: Rows per INSERT statement in the batch form.
BATCH_CHUNK = 5000


@dataclass(frozen=True)
class TaskSpec:
    """One task to enqueue. Construction validates it: any bad field, or a keyword
    that is not a field, raises :class:`InvalidTaskError` naming it (see
    :mod:`ledgerq.ledger.validation` for the rules)."""

    kind: str
    payload: Any = field(default_factory=dict)
    queue: str = "default"
    business_key: str | None = None
    unique: bool = False
    once: bool = False
    run_at: datetime | None = None
    delay: float | timedelta | None = None
    priority: int = 0
    #: None (unset): the kind's default (``@task(max_attempts=...)``, resolved by the
    #: claim), else 5.
    max_attempts: int | None = None
    #: None (unset): the kind's default (``@task(retry=...)``), else the default backoff.
    retry: RetryLike = None
    #: None (unset): the kind's ``@task(timeout=...)``, else the worker's default.
    timeout: float | timedelta | None = None
    #: The task's shard; None: from ``shard_key``, else from the id (modulo
    #: ``LEDGERQ_SHARDS``; 0 when it is 1).
    shard: int | None = None
    #: Hashed to the shard (``LEDGERQ_SHARDS``; :func:`~ledgerq.ledger.sharding.shard_of`),
    #: so every task of one key lands in one shard; instead of ``shard``.
    shard_key: str | None = None
    parent_id: int | None = None
    #: Tasks sharing an ordering key run one at a time, in commit order (see
    #: docs/howto.md#run-tasks-in-order-per-key).
    ordering_key: str | None = None
    #: Seconds from the insert (database clock) or an aware datetime: a task not
    #: started by then ends ``cancelled``, marked expired, and never runs.
    expires: float | timedelta | datetime | None = None
    #: Short labels (``"tenant:7"``) to find and act on tasks by (``--tag``).
    tags: Sequence[str] | None = None
    #: Task ids this task waits for (docs/howto.md#chains-and-joins; ledger/after.py).
    after: Sequence[int] | None = None
    #: "succeeded" (the default: a dead or cancelled dependency cancels it) or "always".
    after_policy: str = "succeeded"

    def __new__(cls, *args: Any, **kwargs: Any) -> TaskSpec:
        # Before the generated __init__, so an unknown keyword (``enqueue`` passes its
        # options through) is an InvalidTaskError naming it, not a TypeError.
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(kwargs) - set(names))
        if unknown:
            raise InvalidTaskError(
                f"unknown task option {unknown[0]!r}; the options are {', '.join(names[2:])}"
            )
        if len(args) > 2:
            raise InvalidTaskError(
                f"give kind and payload positionally and the rest as keywords; got "
                f"{len(args)} positional arguments"
            )
        return super().__new__(cls)

    def __post_init__(self) -> None:
        # Validate eagerly; params() re-reads the (immutable) fields.
        self.params()
        self.dependencies()

    def dependencies(self) -> After | None:
        """The validated ``after`` and ``after_policy``, or None (ledger/after.py)."""
        return check_after(self.after, self.after_policy, deduplicated=self.unique or self.once)

    def params(self) -> dict[str, Any]:
        """The INSERT's bound parameters, or InvalidTaskError."""
        kind = v.check_name(self.kind, "kind")
        business_key = v.check_business_key(self.business_key)
        if v.check_flag(self.unique, "unique") and business_key is None:
            raise InvalidTaskError("unique=True needs a business_key to de-duplicate on")
        once = v.check_flag(self.once, "once")
        if once and business_key is None:
            raise InvalidTaskError("once=True needs a business_key to de-duplicate on")
        run_at, delay_s = v.resolve_due(self.run_at, self.delay)
        expires_at, expires_s = v.resolve_expiry(self.expires, run_at, delay_s)
        retry = None if self.retry is None else json.dumps(v.check_retry(self.retry).to_json())
        return {
            "kind": kind,
            "queue": v.check_name(self.queue, "queue"),
            "payload": v.encode_payload({} if self.payload is None else self.payload),
            "business_key": business_key,
            # once=True: the permanent key (ledgerq_unique_keys) covers live duplicates too.
            "dedupe_key": business_key if self.unique and not once else None,
            "once": once,
            "priority": v.check_priority(self.priority),
            "shard": _shard_of(self, shards := _shard_count()),
            "shards": shards,
            "run_at": run_at,
            "delay_s": delay_s,
            "max_attempts": None
            if self.max_attempts is None
            else v.check_max_attempts(self.max_attempts),
            "retry": retry,
            "timeout_s": v.check_optional_seconds(self.timeout, "timeout"),
            "parent_id": None
            if self.parent_id is None
            else v.check_int_option(self.parent_id, "parent_id", minimum=1),
            "trace_context": tracing.current_context(),
            "ordering_key": v.check_key(self.ordering_key, "ordering_key"),
            "expires_at": expires_at,
            "expires_s": expires_s,
            "tags": v.check_tags(self.tags),
        }


def _shard_of(spec: TaskSpec, count: int) -> int | None:
    """The task's shard, or None: the INSERT takes it from the new id (modulo count)."""
    key = v.check_key(spec.shard_key, "shard_key")
    if spec.shard is not None:
        if key is not None:
            raise InvalidTaskError("give shard or shard_key, not both")
        return v.check_int_option(spec.shard, "shard", maximum=v.MAX_SHARD)
    if key is not None:
        return shard_of(key, 0, count)
    return 0 if count == 1 else None


def _shard_count() -> int:
    try:
        return deployment_count()
    except ValueError as exc:
        raise InvalidTaskError(str(exc)) from None


def rows_document(specs: Sequence[TaskSpec]) -> str:
    """One JSON array of rows for ``insert_tasks``; payloads are embedded as JSON."""
    parts = []
    for spec in specs:
        if not isinstance(spec, TaskSpec):
            raise InvalidTaskError(f"a batch takes TaskSpec objects, got a {type(spec).__name__}")
        params = spec.params()
        payload, retry = params.pop("payload"), params.pop("retry")
        trace = params.pop("trace_context") or "null"
        # In UTC: an offset with seconds (valid in Python) prints as text
        # PostgreSQL refuses ("+00:00:00.000001").
        for name in ("run_at", "expires_at"):
            when = params.pop(name)
            params[name] = when.astimezone(UTC).isoformat() if when is not None else None
        head = json.dumps(params, separators=(",", ":"))
        parts.append(
            head[:-1]
            + ',"payload":'
            + payload
            + ',"retry":'
            + (retry or "null")
            + ',"trace_context":'
            + trace
            + "}"
        )
    return "[" + ",".join(parts) + "]"


def chunks(specs: Iterable[TaskSpec]) -> Iterable[list[TaskSpec]]:
    chunk: list[TaskSpec] = []
    for spec in specs:
        chunk.append(spec)
        if len(chunk) >= BATCH_CHUNK:
            yield chunk
            chunk = []
    if chunk:
        yield chunk
