"""JSON-RPC over byte streams: pure framing, a lean peer, and the pipes and processes of stdio."""
