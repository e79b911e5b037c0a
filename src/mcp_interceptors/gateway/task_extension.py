"""Governed 2026-07-28 tasks: the `io.modelcontextprotocol/tasks` extension (SEP-2663) between a 2026-07-28
client and a 2026-07-28 upstream.

The upstream decides that a `tools/call` becomes a task, for a client that declared the extension in its
request's `_meta` client capabilities: it answers with a flat `CreateTaskResult` (`resultType: "task"`,
`taskId`, `status`, ...). That call ran the request chain as any call does; its answer passes, its words
scrubbed, and the task is remembered with its owner and audit call (`TaskRegistry`, any replica finds it).
`tasks/get`, `tasks/update` and `tasks/cancel` go to the owning upstream for the owner only (another caller
is told the task does not exist). The first `tasks/get` that shows the task ended closes its audit call: the
response chain runs on the inlined `result` (a block shows the task `failed` with the block's error), or the
inlined `error` or the cancellation is recorded; later polls get the chain again and record nothing. An
`input_required` task's `inputRequests` run their request chains, and the answers `tasks/update` carries run
the response chains of the requests they answer. An acked `tasks/cancel` closes the call `cancelled` (the
client is done with the task). The messages are raw dicts: mcp 2.3 defines none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mcp import MCPError
from mcp.shared.inbound import MCP_NAME_HEADER, encode_header_value
from mcp_types import MISSING_REQUIRED_CLIENT_CAPABILITY

from mcp_interceptors.gateway.connections import Connections
from mcp_interceptors.gateway.input_rounds import InputRounds
from mcp_interceptors.gateway.recording import CallRecord
from mcp_interceptors.gateway.reply import Replies
from mcp_interceptors.gateway.session import Downstream, DownstreamSession
from mcp_interceptors.gateway.task_relay import OwnedTask, TaskRegistry, owner_of, unknown_task
from mcp_interceptors.gateway.tasks import TASKS_EXTENSION, declares_tasks
from mcp_interceptors.gateway.upstream.connection import UpstreamConnection
from mcp_interceptors.protocol.errors import INTERNAL_ERROR
from mcp_interceptors.protocol.invoke import InvocationContext

if TYPE_CHECKING:
    from mcp_interceptors.gateway.governor import Governor

ERA = "2026-07-28"
_ENDED = ("completed", "failed", "cancelled")
#: Where each `inputRequests` key of a task was asked (key -> method), so its answer's chain is known.
_ASKED_FIELD = "asked"


def undeclared(method: str) -> MCPError:
    """A task request from a client whose request does not declare the extension (SEP-2575's -32021)."""
    return MCPError(
        MISSING_REQUIRED_CLIENT_CAPABILITY,
        f"{method}: the request's client capabilities do not declare the {TASKS_EXTENSION} extension",
        {"requiredCapabilities": {"extensions": {TASKS_EXTENSION: {}}}},
    )


def ungoverned_task(method: str, upstream: str) -> MCPError:
    """A `resultType: "task"` the gateway cannot follow to its result: refused, not passed on."""
    return MCPError(
        INTERNAL_ERROR,
        f"{method}: upstream {upstream!r} answered with a task the gateway does not govern",
        {
            "upstream": upstream,
            "reason": f"the gateway governs {TASKS_EXTENSION} tasks of tools/call between 2026-07-28 peers only",
        },
    )


def answers_key(task_id: str) -> str:
    """Where a task's open input requests are kept for their answers (never sent: tasks carry no requestState)."""
    return f"gateway-task:{task_id}"


def error_object(exc: MCPError) -> dict[str, Any]:
    error: dict[str, Any] = {"code": exc.error.code, "message": exc.error.message}
    if exc.error.data is not None:
        error["data"] = exc.error.data
    return error


class ExtensionTasks:
    """Serves a 2026-07-28 client's `tasks/get`, `tasks/update` and `tasks/cancel` on its own tasks."""

    def __init__(self, registry: TaskRegistry, connections: Connections, replies: Replies, rounds: InputRounds):
        self.registry = registry
        self.connections = connections
        self.replies = replies
        self.rounds = rounds

    async def created(
        self,
        session: DownstreamSession,
        conn: UpstreamConnection,
        method: str,
        params: Mapping[str, Any],
        result: dict[str, Any],
        record: CallRecord,
    ) -> dict[str, Any] | None:
        """The `CreateTaskResult` to answer with (scrubbed; the task remembered), or None: `result` is no task."""
        if result.get("resultType") != "task":
            return None
        task_id = result.get("taskId")
        governed = method == "tools/call" and session.era == ERA and conn.era == ERA and declares_tasks(params)
        if not governed or not isinstance(task_id, str) or not task_id:
            raise ungoverned_task(method, conn.name)
        await self.registry.remember(result, OwnedTask(owner_of(session), conn.name, record.call_id, era=ERA))
        return self.scrubbed(result)

    async def serve(
        self,
        governor: Governor,
        session: DownstreamSession,
        method: str,
        params: dict[str, Any] | None,
        downstream: Downstream,
        request_id: Any,
    ) -> dict[str, Any]:
        if not declares_tasks(params):
            raise undeclared(method)
        task_id = (params or {}).get("taskId")
        owned = await self.registry.owned_by(task_id, owner_of(session), ERA)
        conn = (await self.connections.of(session)).get(owned.upstream) if owned is not None else None
        if owned is None or conn is None or not isinstance(task_id, str):
            raise unknown_task(method, task_id)
        headers = {MCP_NAME_HEADER: encode_header_value(task_id)} if conn.is_http else None
        context = session.context(owned.upstream, request_id)
        if method == "tasks/update":
            await self._answers(session, task_id, owned, params, context)
        answered = await conn.request(method, params, headers=headers, on_notify=downstream.notify_related)
        if method == "tasks/cancel" and await self._ends_first(session, task_id):
            # Acked: the client is done with it; a later tasks/get governs what it shows, recording nothing.
            await self.replies.continued_record(context, owned.call_id).cancelled("tools/call")
        if method != "tasks/get":
            return self.scrubbed(answered)  # the acks of tasks/update and tasks/cancel
        status = answered.get("status")
        if status == "input_required":
            return await self._asked(session, task_id, owned, answered, context)
        if status not in _ENDED:
            return self.scrubbed(answered)
        first = await self._ends_first(session, task_id)
        record = self.replies.continued_record(context, owned.call_id) if first else CallRecord(None, context, "")
        return await self._ended(governor, answered, context, record)

    async def _ends_first(self, session: DownstreamSession, task_id: str) -> bool:
        """Whether the task's end is first seen now (its call is then closed here, once, on any replica): input
        requests of it still awaiting answers will get none, so their audit calls are closed too."""
        if not await self.registry.first_to_settle(task_id):
            return False
        awaited = [(session.key, answers_key(task_id), key) for key in await self.registry.asked(task_id)]
        await self.rounds.open_inputs.forget("the task ended", awaited)
        return True

    async def _ended(
        self, governor: Governor, answered: dict[str, Any], context: InvocationContext, record: CallRecord
    ) -> dict[str, Any]:
        """A `tasks/get` showing the task ended: its inlined result governed as a plain call's, or its end recorded."""
        shown = self.scrubbed({key: value for key, value in answered.items() if key not in ("result", "error")})
        status, result, error = answered.get("status"), answered.get("result"), answered.get("error")
        if status == "completed" and isinstance(result, dict):
            try:
                governed = await governor.govern_response("tools/call", result, context, record)
            except MCPError as exc:  # blocked (recorded already), or the chain failed: no result reaches the client
                blocked = self.replies.scrub_error(exc)
                await record.failed("tools/call", blocked.error.code, blocked.error.message)
                await record.settle()
                return {**shown, "status": "failed", "error": error_object(blocked)}
            return {**shown, "result": await self.replies.settled(governed, record)}
        if status == "cancelled":
            await record.cancelled("tools/call")
            return shown
        if not isinstance(error, Mapping) or not isinstance(error.get("code"), int):
            error = {"code": INTERNAL_ERROR, "message": f"the task ended {status!r} without its {status} payload"}
        failed = self.replies.scrub_error(MCPError(error["code"], str(error.get("message", "")), error.get("data")))
        await record.failed("tools/call", failed.error.code, failed.error.message)
        await record.settle()
        return {**shown, "status": "failed", "error": error_object(failed)}

    async def _asked(
        self,
        session: DownstreamSession,
        task_id: str,
        owned: OwnedTask,
        answered: dict[str, Any],
        context: InvocationContext,
    ) -> dict[str, Any]:
        """An `input_required` task: each input request runs its request chain (recorded once, when first
        shown), and where it was asked is remembered for the answer that `tasks/update` brings."""
        requests = answered.get("inputRequests")
        if not isinstance(requests, Mapping):
            return self.scrubbed(answered)
        asked = await self.registry.asked(task_id)
        fresh = {key: value for key, value in requests.items() if str(key) not in asked}
        round_: dict[str, Any] = {"inputRequests": dict(requests)}
        if fresh:  # recorded now, each an audit call its answer closes (`_answers`)
            record = self.replies.continued_record(context, owned.call_id)
            round_["requestState"] = answers_key(task_id)
        else:  # shown before: governed again, recorded once
            record = CallRecord(None, context, "")
        governed = await self.rounds.govern_requests(session, round_, context, record)
        await record.settle()
        if fresh:
            methods = {str(key): str(value.get("method")) for key, value in fresh.items() if isinstance(value, Mapping)}
            await self.registry.remember_asked(task_id, methods)
        shown = self.scrubbed({key: value for key, value in answered.items() if key != "inputRequests"})
        return {**shown, "inputRequests": governed.get("inputRequests", {})}

    async def _answers(
        self,
        session: DownstreamSession,
        task_id: str,
        owned: OwnedTask,
        params: dict[str, Any] | None,
        context: InvocationContext,
    ) -> None:
        """`tasks/update`'s `inputResponses` run the response chain of the requests they answer (a refusal is
        the client's error, and nothing reaches the upstream)."""
        asked = await self.registry.asked(task_id)
        record = self.replies.continued_record(context, owned.call_id)
        # Under the task's own key, so each answer closes the audit call of the request it answers (the dict of
        # answers is shared: what the chains made of them is what goes upstream).
        keyed = {**(params or {}), "requestState": answers_key(task_id)}
        await self.rounds.govern_responses(session, keyed, context, record, asked)
        await record.settle()

    def scrubbed(self, result: dict[str, Any]) -> dict[str, Any]:
        """A task's status, its words scrubbed as a result no event covers is (D18), its task id kept."""
        scrubbed = self.replies.scrub_result(result)
        if scrubbed is not result and "taskId" in result:
            scrubbed["taskId"] = result["taskId"]
        return scrubbed
