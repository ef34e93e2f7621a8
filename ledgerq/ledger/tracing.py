"""Traces from producer to handler, with OpenTelemetry (the ``otel`` extra).

``enqueue`` records the trace context it runs in (:func:`current_context`: the
W3C ``traceparent``/``tracestate`` carrier, as OpenTelemetry's global
propagator writes it) in the task's ``trace_context`` column. The relay's
publish (:class:`PublishSpans`) and the worker's handler (:func:`handler_span`)
run as spans whose parent is that context, so one trace shows the request that
enqueued, the publish and the handler; spans and enqueues inside the handler
are children of the handler's span.

The context travels in the row, not in the AMQP message: the relay reads it
with the due rows and the worker with its claim (both read the row anyway), so
the message format does not change, and a re-publish by the reconciler (another
AMQP client) or a delivery that overtook the relay's commit continues the same
trace with no header to copy.

**Without the extra, nothing is imported and nothing costs.** ``enqueue``
looks OpenTelemetry up in ``sys.modules`` only: a producer that has not
imported it has no span to record, so ledgerq never imports it on the
producer's behalf. The services call into this module only for rows that carry
a context; the first such row imports the API (once; if it is not installed,
nothing is traced). Spans go to whatever tracer provider the process configured
(the worker's ``--app`` module, typically); with none, the API's no-op one.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ledgerq.ledger.model import ClaimedTask, DueTask

#: The instrumentation scope name of ledgerq's spans.
TRACER_NAME = "ledgerq"

_api: Any = None  # (trace, propagate) once imported; False if not installed


def current_context() -> str | None:
    """The active span's context as JSON text for the ``trace_context`` column, or None
    (no OpenTelemetry imported by this process, or no active span)."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    api = _otel()
    if not api:
        return None
    carrier: dict[str, str] = {}
    api[1].inject(carrier)
    return json.dumps(carrier, separators=(",", ":")) if carrier else None


def _otel() -> Any:
    global _api
    if _api is None:
        try:
            from opentelemetry import propagate, trace
        except ImportError:
            _api = False
        else:
            _api = (trace, propagate)
    return _api


def _parent(carrier: dict[str, str]) -> Any:
    return _otel()[1].extract(carrier)


def _attributes(task: DueTask | ClaimedTask) -> dict[str, Any]:
    return {
        "messaging.system": "rabbitmq",
        "messaging.destination.name": task.queue,
        "ledgerq.task.id": task.id,
        "ledgerq.task.kind": task.kind,
    }


class PublishSpans:
    """A ``publish`` span per traced row of a relay batch, ended with its outcome."""

    def __init__(self, rows: Sequence[DueTask]) -> None:
        self._spans: list[tuple[int, Any]] = []
        if not _otel():
            return
        trace = _otel()[0]
        tracer = trace.get_tracer(TRACER_NAME)
        for i, row in enumerate(rows):
            if row.trace_context:
                span = tracer.start_span(
                    f"publish {row.kind}",
                    context=_parent(row.trace_context),
                    kind=trace.SpanKind.PRODUCER,
                    attributes=_attributes(row),
                )
                self._spans.append((i, span))

    def end(self, outcomes: Sequence[str]) -> None:
        """End each span with its row's outcome (``confirmed`` is success)."""
        if not self._spans:
            return
        status = _otel()[0].Status
        code = _otel()[0].StatusCode
        for i, span in self._spans:
            outcome = outcomes[i] if i < len(outcomes) else "failed"
            span.set_attribute("ledgerq.publish.outcome", outcome)
            if outcome != "confirmed":
                span.set_status(status(code.ERROR, f"not confirmed: {outcome}"))
            span.end()


@contextmanager
def handler_span(task: ClaimedTask) -> Iterator[Any]:
    """The handler's span, current while it runs (a no-op without OpenTelemetry)."""
    if not task.trace_context or not _otel():
        yield None
        return
    trace = _otel()[0]
    tracer = trace.get_tracer(TRACER_NAME)
    attributes = _attributes(task) | {"ledgerq.task.attempt": task.attempts}
    with tracer.start_as_current_span(
        f"process {task.kind}",
        context=_parent(task.trace_context),
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        yield span


def failed(span: Any, error: str) -> None:
    """Mark the handler's span failed with the attempt's recorded error (last line)."""
    if span is None:
        return
    trace = _otel()[0]
    lines = error.strip().splitlines()
    span.set_status(trace.Status(trace.StatusCode.ERROR, lines[-1] if lines else error))
