"""The gateway: fronts, the forwarder and the upstream connections (docs/architecture.md shows the call path)."""
