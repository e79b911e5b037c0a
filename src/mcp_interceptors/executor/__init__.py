"""Runs a `Plan` (spec §5.3-§5.8): awaits sources, runs validators in parallel, enforces deadlines.

The executor only awaits; every decision is `planning`'s. `run.execute_plan` is the loop, `still.py` its
common path for in-process handlers that never suspend; sources arrive through the `Source` protocol
(`calls.py`), so the same loop drives in-process hosts and remote MCP hosts.
"""

from mcp_interceptors.executor.calls import Call, ChainResult, Runner, Source
from mcp_interceptors.executor.outcomes import DEADLINE
from mcp_interceptors.executor.run import execute_plan

__all__ = ["DEADLINE", "Call", "ChainResult", "Runner", "Source", "execute_plan"]
