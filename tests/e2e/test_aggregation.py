"""Two real upstreams (two copies of `examples/upstream_server.py`) behind one gateway: prefixed tools
and prompts, resources routed by owner, and a name collision rejected at start.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from e2e_support import (
    ERAS,
    EXAMPLES_DIR,
    ConfigWriter,
    Target,
    gateway_env,
    raw_request,
    text_of,
    unique,
    write_yaml,
)
from helpers import cli_argv, free_tcp_port, run_cli, running
from mcp import Client
from mcp.shared.exceptions import MCPError

pytestmark = [pytest.mark.anyio, pytest.mark.e2e]

PAGINATED = str(Path(__file__).resolve().parent / "paginated_upstream.py")

EXAMPLE = str(EXAMPLES_DIR / "upstream_server.py")
EXAMPLE_TOOLS = ["echo", "save_note", "read_note", "delete_everything", "countdown", "sleep", "ask"]


def two_upstreams(**archive: Any) -> dict[str, Any]:
    return {
        "upstreams": {
            "notes": {"command": sys.executable, "args": [EXAMPLE]},
            "archive": {"command": sys.executable, "args": [EXAMPLE], "env": {"NOTES_SCHEME": "archive"}, **archive},
        }
    }


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def aggregate_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_yaml(tmp_path_factory.mktemp("aggregate") / "gateway.yaml", two_upstreams(prefix="arc"))


@pytest.fixture(scope="module")
async def aggregate_http(aggregate_file: Path) -> AsyncIterator[str]:
    port = free_tcp_port()
    argv = cli_argv("gateway", "--config", str(aggregate_file), "--http", f"127.0.0.1:{port}")
    async with running(argv, port=port, env=gateway_env(), label="aggregating HTTP gateway"):
        yield f"http://127.0.0.1:{port}/mcp"


@pytest.mark.parametrize("transport", ["stdio", "http"])
@pytest.mark.parametrize("era", ERAS)
async def test_two_upstreams_are_merged_under_their_prefixes_and_routed_to_their_owner(
    aggregate_file: Path, aggregate_http: str, transport: str, era: str
) -> None:
    note = unique("n")
    target = Target(transport, aggregate_file, aggregate_http)
    with anyio.fail_after(60):
        async with target.client(era) as client:
            tools = [tool.name for tool in (await client.list_tools()).tools]
            prompts = [prompt.name for prompt in (await client.list_prompts()).prompts]
            templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
            saved = await client.call_tool("arc__save_note", {"name": note, "text": "archived text"})
            from_archive = await client.call_tool("arc__read_note", {"name": note})
            from_notes = await client.call_tool("notes__read_note", {"name": note})
            resource = await client.read_resource(f"archive://{note}")
            prompt = await client.get_prompt("arc__summarise", {"name": note})
            with pytest.raises(MCPError) as bare:
                await client.call_tool("echo", {"text": "no prefix"})
    assert sorted(tools) == sorted([f"notes__{t}" for t in EXAMPLE_TOOLS] + [f"arc__{t}" for t in EXAMPLE_TOOLS])
    assert sorted(prompts) == ["arc__summarise", "notes__summarise"]
    assert sorted(templates) == ["archive://{name}", "notes://{name}"]
    assert text_of(saved) == f"saved {note} (13 chars)"
    assert text_of(from_archive) == "archived text"
    assert text_of(from_notes) == ""  # the other upstream never saw it
    assert [getattr(c, "text", None) for c in resource.contents] == ["archived text"]
    assert [getattr(m.content, "text", None) for m in prompt.messages] == ["Summarise this note: archived text"]
    assert (bare.value.code, bare.value.message) == (-32602, "Unknown tool: echo")


@pytest.mark.parametrize(
    ("notes", "archive", "message"),
    [
        (
            {"prefix": ""},
            {"prefix": ""},
            "tool 'echo' is exposed by both upstream 'notes' and 'archive'; "
            "give one of them a distinct `prefix` in the config",
        ),
        (
            {},
            {"env": {"NOTES_SCHEME": "notes"}},
            "uriTemplate 'notes://{name}' is exposed by both upstream 'notes' and 'archive'; "
            "resource URIs are not prefixed: front only one of them",
        ),
    ],
    ids=["tool-name", "resource-template"],
)
async def test_collision_is_rejected_at_start_with_one_clear_line(
    write_config: ConfigWriter, notes: dict[str, Any], archive: dict[str, Any], message: str
) -> None:
    raw = two_upstreams(**archive)
    raw["upstreams"]["notes"].update(notes)  # unprefixed both: only their listings can tell
    config = write_config(raw)
    done = await run_cli("gateway", "--config", str(config), env=gateway_env())
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 1
    assert lines[-1] == f"mcp-interceptors gateway: error: {message}"


async def test_upstreams_with_one_prefix_are_refused_before_either_starts(write_config: ConfigWriter) -> None:
    config = write_config(two_upstreams(prefix="notes"))  # `notes` is the other's name, so its default prefix
    done = await run_cli("gateway", "--config", str(config), env=gateway_env())
    assert done.returncode == 1
    assert done.stderr.decode().strip() == (
        f"mcp-interceptors gateway: error: {config}: upstreams.archive.prefix: 'notes' is also the prefix of "
        "upstream 'notes', so calls could not be routed (fix: give upstream 'notes' or 'archive' another "
        "`prefix` (neither may start with the other's followed by '__'))"
    )


def completing_upstreams() -> dict[str, Any]:
    upstream = str(Path(__file__).parent / "completing_upstream.py")
    return {
        "upstreams": {
            name: {"command": sys.executable, "args": [upstream], "env": {"COMPLETING_NAME": name}}
            for name in ("left", "right")
        }
    }


@pytest.mark.parametrize("era", ERAS)
async def test_completion_reaches_the_owner_of_a_prefixed_prompt_or_a_template_under_its_own_name(
    write_config: ConfigWriter, era: str
) -> None:
    target = Target("stdio", write_config(completing_upstreams()))
    argument = {"name": "q", "value": "ab"}
    with anyio.fail_after(60):
        async with target.client(era) as client:
            prompt = await client.complete(types.PromptReference(type="ref/prompt", name="right__greet"), argument)
            # The template's own text: `{?q}` matches no URI written as the template, only `...?q=...`.
            template = types.ResourceTemplateReference(type="ref/resource", uri="right://search{?q}")
            by_template = await client.complete(template, argument)
            with pytest.raises(MCPError) as unknown:
                await client.complete(types.PromptReference(type="ref/prompt", name="greet"), argument)
            with pytest.raises(MCPError) as bad_ref:
                await raw_request(client, "completion/complete", {"ref": {"type": "ref/tool"}, "argument": {}})
    assert prompt.completion.values == ["right:greet:ab"]  # its own name, not the gateway's prefixed one
    assert by_template.completion.values == ["right:right://search{?q}:ab"]
    assert (unknown.value.code, unknown.value.message) == (-32602, "Unknown prompt: greet")
    assert (bad_ref.value.code, bad_ref.value.data) == (-32602, {"field": "ref.type"})


@pytest.mark.parametrize("era", ERAS)
async def test_a_merged_listing_refuses_a_cursor_it_never_gave_and_keeps_what_it_listed(
    write_config: ConfigWriter, era: str
) -> None:
    target = Target("stdio", write_config(completing_upstreams()))
    with anyio.fail_after(60):
        async with target.client(era) as client:
            listed = [prompt.name for prompt in (await client.list_prompts()).prompts]
            with pytest.raises(MCPError) as stale:
                await raw_request(client, "prompts/list", {"cursor": "from-another-gateway"})
            prompt = await client.get_prompt("left__greet", {"who": "ada"})
    assert sorted(listed) == ["left__greet", "right__greet"]  # every page of every upstream: no nextCursor
    assert (stale.value.code, stale.value.data) == (-32602, {"field": "cursor"})
    assert [getattr(m.content, "text", None) for m in prompt.messages] == ["hello ada"]


def paginated_upstream(interceptors: dict[str, Any] | None = None) -> dict[str, Any]:
    """One upstream listing tool0..tool4 two per page, optionally behind interceptors."""
    config: dict[str, Any] = {"upstreams": {"paged": {"command": sys.executable, "args": [PAGINATED]}}}
    if interceptors:
        config["interceptors"] = interceptors
    return config


async def every_page(client: Client, params: dict[str, Any] | None = None) -> list[str]:
    names: list[str] = []
    cursor = None
    while True:
        page = await raw_request(client, "tools/list", {"cursor": cursor} if cursor else (params or {}))
        names += [tool["name"] for tool in page["tools"]]
        if not (cursor := page.get("nextCursor")):
            return names


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_on_a_later_page_is_callable_without_listing_and_after_page_one_is_listed_again(
    write_config: ConfigWriter, era: str
) -> None:
    target = Target("stdio", write_config(paginated_upstream()))
    with anyio.fail_after(60):
        async with target.client(era) as client:
            unlisted = await raw_request(client, "tools/call", {"name": "tool4", "arguments": {}})
        async with target.client(era) as client:
            listed = await every_page(client)
            await raw_request(client, "tools/list", {})  # page 1 again: pages 2 and 3 stay shown
            relisted = await raw_request(client, "tools/call", {"name": "tool4", "arguments": {}})
    assert unlisted["content"][0]["text"] == "ran tool4"
    assert listed == [f"tool{index}" for index in range(5)]
    assert relisted["content"][0]["text"] == "ran tool4"


@pytest.mark.parametrize("era", ERAS)
async def test_a_tool_filtered_from_a_later_page_stays_refused_when_called_without_listing(
    write_config: ConfigWriter, era: str
) -> None:
    # Only the listing filter acts: the call-time check is in audit mode, so what refuses tool3 is that this
    # session was never shown it (on page 2, which the client did not list).
    policy = {
        "guards": [{"name": "tool-policy", "config": {"deny": ["tool3"]}}],
        "overrides": {"tool-policy": {"mode": "audit"}},
    }
    target = Target("stdio", write_config(paginated_upstream(policy)))
    with anyio.fail_after(60):
        async with target.client(era) as client:
            with pytest.raises(MCPError) as refused:
                await raw_request(client, "tools/call", {"name": "tool3", "arguments": {}})
            allowed = await raw_request(client, "tools/call", {"name": "tool4", "arguments": {}})
            listed = await every_page(client)
    assert (refused.value.code, refused.value.message) == (-32602, "Unknown tool: tool3")
    assert allowed["content"][0]["text"] == "ran tool4"
    assert listed == ["tool0", "tool1", "tool2", "tool4"]
