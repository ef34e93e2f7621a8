"""Traces with the ``otel`` extra: a span around ``enqueue`` (the web request)
is continued by the relay's publish and the worker's handler, through the
task's ``trace_context`` column; spans inside the handler are its children.
Recorded with the SDK's in-memory exporter, against the real services."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy.orm import Session

from ledgerq import Abort, AsyncTaskContext, Registry, TaskContext, TaskSpec, enqueue
from ledgerq.core.config import Settings
from ledgerq.ledger.pg import PgLedger
from ledgerq.ledger.pg.engines import sync_engine
from tests.harness import Pipeline, enqueue_committed

EXPORTER = InMemorySpanExporter()


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


def parent_of(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def test_one_trace_from_the_request_through_publish_to_the_handler(
    settings: Settings, ledger: PgLedger, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("tests")
    registry = Registry()

    @registry.task("t.traced")
    async def traced(payload: Any, ctx: AsyncTaskContext) -> None:
        with tracer.start_as_current_span("inside the handler"):
            pass

    with tracer.start_as_current_span("POST /orders") as request:
        [task_id] = enqueue_committed(settings, [TaskSpec("t.traced", {"n": 1})])
    async with Pipeline(settings, registry) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "succeeded"}

    got = by_name(spans)
    root = request.get_span_context()
    publish, process = got["publish t.traced"], got["process t.traced"]
    inside = got["inside the handler"]
    assert {s.context.trace_id for s in (publish, process, inside)} == {root.trace_id}
    assert parent_of(publish) == root.span_id and parent_of(process) == root.span_id
    assert parent_of(inside) == process.context.span_id
    assert publish.kind is trace.SpanKind.PRODUCER and process.kind is trace.SpanKind.CONSUMER
    assert publish.attributes is not None and process.attributes is not None
    assert publish.attributes["ledgerq.publish.outcome"] == "confirmed"
    assert process.attributes["ledgerq.task.id"] == task_id
    assert process.attributes["ledgerq.task.attempt"] == 1
    assert process.status.status_code is trace.StatusCode.UNSET
    stored = (await ledger.show(task_id))["trace_context"]
    assert stored["traceparent"].startswith(f"00-{root.trace_id:032x}-{root.span_id:016x}-")


async def test_a_sync_handler_enqueued_singly_fails_in_its_span(
    settings: Settings, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("tests")
    registry = Registry()

    @registry.task("t.doomed")
    def doomed(payload: Any, ctx: TaskContext) -> None:
        with tracer.start_as_current_span("inside the thread"):
            raise Abort("the card was declined")

    engine = sync_engine(settings, "test-traces", pool_size=1)
    try:
        with (
            tracer.start_as_current_span("POST /pay") as request,
            Session(engine) as session,
            session.begin(),
        ):
            task_id = enqueue(session, "t.doomed", {})
    finally:
        engine.dispose()
    async with Pipeline(settings, registry) as pipe:
        assert await pipe.settle([task_id]) == {task_id: "dead"}

    got = by_name(spans)
    process, inside = got["process t.doomed"], got["inside the thread"]
    assert process.context.trace_id == request.get_span_context().trace_id
    assert parent_of(inside) == process.context.span_id  # the thread ran in its context
    assert process.status.status_code is trace.StatusCode.ERROR
    assert process.status.description == "ledgerq.consumers.execute.Abort: the card was declined"


async def test_a_task_enqueued_outside_any_span_carries_no_context(
    settings: Settings, ledger: PgLedger, spans: InMemorySpanExporter
) -> None:
    registry = Registry()

    @registry.task("t.plain")
    async def plain(payload: Any, ctx: AsyncTaskContext) -> None:
        return None

    [task_id] = enqueue_committed(settings, [TaskSpec("t.plain", {})])
    async with Pipeline(settings, registry) as pipe:
        await pipe.settle([task_id])
    assert (await ledger.show(task_id))["trace_context"] is None
    assert spans.get_finished_spans() == ()
