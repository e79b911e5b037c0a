"""The e2e upstream, speaking only the handshake era: `server/discover` is refused.

The gateway then talks `initialize` to it, and bridges its server-to-client requests for
2026-07-28 clients through `input_required` rounds (the case of every TypeScript-SDK server).
"""

from e2e_upstream import serve_one_era

if __name__ == "__main__":
    serve_one_era("server/discover")
