"""The demo behind the README's first command: interceptor servers chained by a client.

Starts the example validator and mutator servers as stdio subprocesses, chains them, and shows
an allowed (redacted) call and a blocked one.
"""

from __future__ import annotations

import anyio
from chain_client import main as chain_demo  # type: ignore[import-not-found]


async def main() -> None:
    print("== interceptor servers over stdio, chained by a client ==")
    await chain_demo(http=False)


if __name__ == "__main__":
    anyio.run(main)
