"""The serving package's `codec/` layer: see docs/architecture.md."""
