"""OpenTelemetry, off unless configured. Trace context travels inside each event (the CloudEvents
``traceparent`` attribute, also copied to the NATS header) and into the trainer (``TRACEPARENT``),
so one trace spans submit → schedule → train → register.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
    SpanExportResult,
)
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .settings import CommonSettings

_propagator = TraceContextTextMapPropagator()
_service = "forge"


class JsonLinesExporter(SpanExporter):
    """Appends one JSON object per finished span to a file (for tests and simple setups)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = []
        for span in spans:
            ctx = span.get_span_context()
            parent = span.parent
            lines.append(
                json.dumps(
                    {
                        "service": span.resource.attributes.get("service.name"),
                        "name": span.name,
                        "trace_id": f"{ctx.trace_id:032x}" if ctx else None,
                        "span_id": f"{ctx.span_id:016x}" if ctx else None,
                        "parent_id": f"{parent.span_id:016x}" if parent else None,
                        "attributes": {k: str(v) for k, v in (span.attributes or {}).items()},
                    }
                )
            )
        with self._lock, open(self.path, "a", encoding="utf-8") as fh:
            fh.write("".join(line + "\n" for line in lines))
        return SpanExportResult.SUCCESS


def setup(service: str, settings: CommonSettings) -> None:
    """Install a tracer provider for this process when an exporter is configured."""
    global _service
    _service = service
    if settings.telemetry_exporter == "none":
        return
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if settings.telemetry_exporter == "console":
        provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter()))
    elif settings.telemetry_exporter == "file":
        path = settings.telemetry_file or settings.home / "traces.jsonl"
        provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(Path(path))))
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        endpoint = settings.telemetry_endpoint or "http://127.0.0.1:4318/v1/traces"
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
    trace.set_tracer_provider(provider)


def shutdown() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


def current_traceparent() -> str | None:
    carrier: dict[str, str] = {}
    _propagator.inject(carrier)
    return carrier.get("traceparent")


@contextmanager
def span(name: str, *, traceparent: str | None = None, **attributes: Any) -> Iterator[str | None]:
    """A span (child of ``traceparent`` when given); yields the traceparent to pass on."""
    token = None
    if traceparent:
        token = otel_context.attach(_propagator.extract({"traceparent": traceparent}))
    try:
        tracer = trace.get_tracer(f"forge.{_service}")
        with tracer.start_as_current_span(name, attributes={k: str(v) for k, v in attributes.items()}):
            yield current_traceparent() or traceparent
    finally:
        if token is not None:
            otel_context.detach(token)
