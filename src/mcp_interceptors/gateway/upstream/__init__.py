"""One upstream MCP server: its connection (kept up, reused), its handshake, its transports and its errors."""
