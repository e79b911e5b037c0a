"""The e2e upstream, speaking only the 2026-07-28 era: `initialize` is refused.

A handshake-era client reaches it through the gateway's bridge (its `input_required` rounds become
server requests to the client).
"""

from e2e_upstream import serve_one_era

if __name__ == "__main__":
    serve_one_era("initialize")
