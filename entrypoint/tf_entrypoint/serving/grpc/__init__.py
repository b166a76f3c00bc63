"""The serving package's `grpc/` layer: see docs/architecture.md."""
