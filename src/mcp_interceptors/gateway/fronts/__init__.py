"""The gateway's fronts: where client messages are read and replies written, on stdio and Streamable HTTP (+ SSE)."""
