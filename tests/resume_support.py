"""A raw Streamable HTTP client for resumable streams (`streams.resumable`): a handshake-era session, a call whose
SSE stream the client drops after some events, and a `GET` with `Last-Event-ID` that resumes it."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx2

E2E_UPSTREAM = str(Path(__file__).resolve().parent / "e2e" / "e2e_upstream.py")
VERSION = "2025-11-25"
ACCEPT = "application/json, text/event-stream"


@dataclass
class Event:
    id: str | None
    data: str

    @property
    def message(self) -> dict[str, Any] | None:
        """The JSON-RPC message, None for a priming event (an id, no data)."""
        return json.loads(self.data) if self.data else None


@dataclass
class Session:
    http: httpx2.AsyncClient
    url: str
    id: str = ""
    seen: list[Event] = field(default_factory=list)

    def headers(self, **extra: str) -> dict[str, str]:
        return {"accept": ACCEPT, "mcp-protocol-version": VERSION, "mcp-session-id": self.id, **extra}

    async def open(self) -> None:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": VERSION, "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        }
        opened = await self.http.post(self.url, json=init, headers={"accept": ACCEPT})
        assert opened.status_code == 200, opened.text
        self.id = opened.headers["mcp-session-id"]
        initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        done = await self.http.post(self.url, json=initialized, headers=self.headers())
        assert done.status_code == 202, done.text

    async def call_then_drop(self, request_id: int, tool: str, arguments: dict[str, Any], keep: int) -> list[Event]:
        """Call `tool` with a progress token; read `keep` events carrying a message, then drop the stream."""
        body = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "tools/call",
            "params": {"name": tool, "arguments": arguments, "_meta": {"progressToken": f"p{request_id}"}},
        }
        got: list[Event] = []
        async with self.http.stream("POST", self.url, json=body, headers=self.headers()) as response:
            assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
            async for event in events(response):
                got.append(event)
                if sum(1 for e in got if e.message is not None) == keep:
                    break
        return got

    async def resume(self, last_event_id: str, url: str | None = None) -> tuple[httpx2.Response, list[Event]]:
        """GET with `Last-Event-ID`: the status, and the events until the stream ends (or an answer arrives)."""
        got: list[Event] = []
        headers = self.headers(**{"last-event-id": last_event_id})
        async with self.http.stream("GET", url or self.url, headers=headers) as response:
            if response.status_code != 200:
                await response.aread()
                return response, got
            async for event in events(response):
                got.append(event)
                message = event.message
                if message is not None and "method" not in message:
                    break
        return response, got


async def events(response: httpx2.Response) -> AsyncIterator[Event]:
    """The SSE events of `response` as they arrive (comments skipped)."""
    event_id: str | None = None
    data: list[str] = []
    seen = False
    async for line in response.aiter_lines():
        if not line:
            if seen:
                yield Event(event_id, "\n".join(data))
            event_id, data, seen = None, [], False
        elif line.startswith(":"):
            continue
        else:
            name, _, value = line.partition(":")
            value = value.removeprefix(" ")
            seen = True
            if name == "id":
                event_id = value
            elif name == "data":
                data.append(value)


def progress_of(got: list[Event]) -> list[float]:
    messages = [e.message for e in got if e.message is not None]
    return [m["params"]["progress"] for m in messages if m.get("method") == "notifications/progress"]


def answer_of(got: list[Event]) -> dict[str, Any]:
    answers = [e.message for e in got if e.message is not None and "method" not in e.message]
    assert len(answers) == 1, got
    return answers[0]
