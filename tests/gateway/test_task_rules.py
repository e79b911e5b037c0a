"""The gateway's task rules (gateway/tasks.py, D19): what it governs and what it refuses, as data."""

from __future__ import annotations

import pytest
from mcp import MCPError

from mcp_interceptors.gateway.task_relay import OwnedTask, TaskRegistry
from mcp_interceptors.gateway.tasks import created_task, offers_tasks, task_refusal, without_tasks
from mcp_interceptors.state.memory import MemoryState


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


@pytest.mark.parametrize("method", ["tasks/get", "tasks/result", "tasks/list", "tasks/cancel"])
def test_a_handshake_era_clients_task_requests_are_served(method: str) -> None:
    assert task_refusal(method, {"taskId": "t"}, governed=True) is None


def test_a_handshake_era_clients_task_augmented_tool_call_is_governed_other_requests_are_not() -> None:
    assert task_refusal("tools/call", {"name": "x", "task": {"ttl": 1000}}, governed=True) is None
    refused = task_refusal("prompts/get", {"name": "x", "task": {"ttl": 1000}}, governed=True)
    assert refused is not None and refused.error.data["field"] == "task"  # type: ignore[index]
    assert task_refusal("notifications/tasks/status", {"taskId": "t"}, governed=True) is not None


def test_a_create_task_result_is_told_from_a_call_run_at_once() -> None:
    task = {"taskId": "t1", "status": "working"}
    assert created_task({"task": task}) == task
    assert created_task({"content": [], "task": task}) is None  # a tool's result that has a `task` of its own
    assert created_task({"task": {"status": "working"}}) is None


def test_an_upstream_offers_tasks_by_capability_or_extension() -> None:
    assert offers_tasks({"tasks": {"requests": {"tools": {"call": {}}}}})
    assert offers_tasks({"extensions": {"io.modelcontextprotocol/tasks": {}}})
    assert not offers_tasks({"tasks": {"requests": {"sampling": {"createMessage": {}}}}})
    assert not offers_tasks({"tools": {}})


@pytest.mark.anyio
async def test_a_task_is_its_owners_only_and_its_id_cannot_be_taken_over() -> None:
    registry = TaskRegistry(MemoryState())
    alice = OwnedTask("user:alice", "tasks", "c1")
    await registry.remember({"taskId": "t1", "ttl": 60000}, alice)
    assert await registry.owned_by("t1", "user:alice") == alice
    assert await registry.owned_by("t1", "user:bob") is None
    assert await registry.owned_by(["t1"], "user:alice") is None  # a task id that is no string
    with pytest.raises(MCPError) as taken:
        await registry.remember({"taskId": "t1", "ttl": None}, OwnedTask("user:bob", "other", "c2"))
    assert taken.value.error.data["reason"] == "task_id_in_use"  # type: ignore[index]
    assert await registry.owned_by("t1", "user:alice") == alice
