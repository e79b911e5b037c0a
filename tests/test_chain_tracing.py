"""`Chain` spans without the gateway (`invoker/tracing.py`): a span per chain run and one per interceptor
invocation, from a provider given to the chain or the one an application set globally, with the gateway's
attribute names; with no provider set, no span is started and the OpenTelemetry SDK is never imported."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from helpers import TRACING_SPY
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

pytestmark = pytest.mark.anyio

HOST = """
from mcp_interceptors import Chain, InterceptorHost, ValidationResult

def guarded_chain(**options):
    host = InterceptorHost("guards")

    @host.validator("deny-rm", events=["tools/call"], phase="request")
    async def deny_rm(inv):
        return ValidationResult(valid=False, severity="error") if inv.payload["params"]["name"] == "rm" else True

    @host.mutator("tag", events=["tools/call"], phase="request")
    async def tag(inv):
        return {**inv.payload, "params": {**inv.payload["params"], "arguments": {"tagged": True}}}

    chain = Chain(role="server", **options)
    chain.add_local(host)
    return chain

def call(name):
    return {"method": "tools/call", "params": {"name": name, "arguments": {}}}
"""
namespace: dict[str, Any] = {}
exec(HOST, namespace)  # the same host for this process's tests and the fresh interpreters' below
guarded_chain, call = namespace["guarded_chain"], namespace["call"]


def traced(spans: InMemorySpanExporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    return provider


async def test_a_chain_run_makes_a_chain_span_and_one_child_per_interceptor_with_the_gateways_attributes() -> None:
    spans = InMemorySpanExporter()
    provider = traced(spans)
    chain = guarded_chain(tracer_provider=provider)
    with anyio.fail_after(10), provider.get_tracer("app").start_as_current_span("handle request") as outer:
        result = await chain.execute("tools/call", "request", call("ls"))
    assert result.allowed
    by_name = {span.name: span for span in spans.get_finished_spans()}
    assert set(by_name) == {"handle request", "chain tools/call request", "interceptor deny-rm", "interceptor tag"}
    run = by_name["chain tools/call request"]
    assert run.kind is SpanKind.INTERNAL
    assert run.parent is not None and run.parent.span_id == outer.get_span_context().span_id
    assert run.attributes is not None and dict(run.attributes) == {
        "mcp_interceptors.chain.event": "tools/call",
        "mcp_interceptors.chain.phase": "request",
        "mcp_interceptors.chain.direction": "receiving",
        "mcp_interceptors.chain.interceptors": 2,
        "mcp_interceptors.chain.outcome": "success",
    }
    expected = (("interceptor deny-rm", "validation", "valid"), ("interceptor tag", "mutation", "modified"))
    for name, kind, status in expected:
        child = by_name[name]
        assert child.parent is not None and child.parent.span_id == run.context.span_id
        assert child.attributes is not None
        assert child.attributes["mcp_interceptors.interceptor.name"] == name.removeprefix("interceptor ")
        assert child.attributes["mcp_interceptors.interceptor.type"] == kind
        assert child.attributes["mcp_interceptors.interceptor.mode"] == "active"
        assert child.attributes["mcp_interceptors.interceptor.status"] == status
        assert isinstance(child.attributes["mcp_interceptors.interceptor.duration_ms"], float)
        assert child.start_time is not None and run.start_time is not None and child.start_time >= run.start_time


async def test_a_blocked_run_marks_the_chain_and_the_deciding_interceptor_as_errors() -> None:
    spans = InMemorySpanExporter()
    chain = guarded_chain(tracer_provider=traced(spans))
    with anyio.fail_after(10):
        result = await chain.execute("tools/call", "request", call("rm"))
    assert not result.allowed
    by_name = {span.name: span for span in spans.get_finished_spans()}
    run, denied = by_name["chain tools/call request"], by_name["interceptor deny-rm"]
    assert run.parent is None  # no span was current: the run starts its own trace
    assert run.status.status_code is StatusCode.ERROR
    assert run.attributes is not None and run.attributes["mcp_interceptors.chain.outcome"] == "validation_failed"
    assert run.attributes["mcp_interceptors.chain.aborted_at"] == "deny-rm"
    assert denied.status.status_code is StatusCode.ERROR
    assert denied.attributes is not None and denied.attributes["mcp_interceptors.interceptor.status"] == "blocked"


async def test_a_provider_that_samples_nothing_gets_no_span() -> None:
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

    spans = InMemorySpanExporter()
    provider = TracerProvider(sampler=ALWAYS_OFF)
    provider.add_span_processor(SimpleSpanProcessor(spans))
    with anyio.fail_after(10):
        assert (await guarded_chain(tracer_provider=provider).execute("tools/call", "request", call("ls"))).allowed
    assert spans.get_finished_spans() == ()


def fresh_interpreter(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """Run `code` after the shared host in a new interpreter (a global provider is set once per process);
    it prints one JSON object."""
    environ = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")} | (env or {})
    argv = [sys.executable, "-c", HOST + code]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=environ)
    assert done.returncode == 0, done.stderr
    found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_the_globally_set_provider_traces_chains_made_before_it_was_set() -> None:
    found = fresh_interpreter(
        """
import anyio, json
chain, untraced = guarded_chain(), guarded_chain(tracer_provider=False)
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
spans = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(spans))
trace.set_tracer_provider(provider)
anyio.run(chain.execute, "tools/call", "request", call("ls"))
anyio.run(untraced.execute, "tools/call", "request", call("ls"))
print(json.dumps({"names": sorted(span.name for span in spans.get_finished_spans())}))
"""
    )
    assert found == {"names": ["chain tools/call request", "interceptor deny-rm", "interceptor tag"]}


RUNS = """
import anyio
chain = guarded_chain()
for _ in range(3):
    anyio.run(chain.execute, "tools/call", "request", call("ls"))
    anyio.run(chain.execute, "tools/call", "request", call("rm"))
print("{}")
"""


def test_with_no_provider_set_a_chain_starts_no_span_and_loads_no_sdk(tmp_path: Path) -> None:
    """mcp loads the OpenTelemetry API; with no provider set, runs that pass and runs that block start no
    span on any tracer, and nothing imports the SDK."""
    spy_dir, report = tmp_path / "spy", tmp_path / "report.json"
    spy_dir.mkdir()
    (spy_dir / "sitecustomize.py").write_text(TRACING_SPY, encoding="utf-8")
    path = os.pathsep.join([str(spy_dir), os.environ.get("PYTHONPATH", "")])
    fresh_interpreter(RUNS, {"PYTHONPATH": path, "TRACING_SPY_REPORT": str(report)})
    assert json.loads(report.read_text()) == {"started": [], "sdk": []}
