"""The serving package's `core/` layer: see docs/architecture.md."""
