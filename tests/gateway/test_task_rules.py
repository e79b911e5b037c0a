"""The gateway's task rules (gateway/tasks.py, D19), as data."""

from __future__ import annotations

import pytest

from mcp_interceptors.gateway.tasks import task_refusal, without_tasks


@pytest.mark.parametrize("method", ["tools/call", "sampling/createMessage", "elicitation/create", "prompts/get"])
def test_a_spec_request_carrying_a_task_is_refused_naming_the_field(method: str) -> None:
    refused = task_refusal(method, {"name": "x", "task": {"ttl": 1000}})
    assert refused is not None
    assert refused.error.code == -32602
    assert refused.error.data["field"] == "task"  # type: ignore[index]


def test_a_custom_methods_own_task_field_passes_through_untouched() -> None:
    assert task_refusal("acme/schedule", {"task": "nightly backup"}) is None
    assert task_refusal("tools/call", {"name": "plan", "arguments": {"task": "x"}}) is None


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"])
def test_task_methods_are_not_found(method: str) -> None:
    refused = task_refusal(method, {"taskId": "t"})
    assert refused is not None
    assert refused.error.code == -32601


def test_no_tasks_are_advertised_in_any_place() -> None:
    capabilities = {
        "tools": {},
        "tasks": {"requests": {"tools": {"call": {}}}},
        "extensions": {"io.modelcontextprotocol/tasks": {}, "other": {}},
        "experimental": {"io.modelcontextprotocol/tasks": {}},
    }
    assert without_tasks(capabilities) == {"tools": {}, "extensions": {"other": {}}, "experimental": {}}
