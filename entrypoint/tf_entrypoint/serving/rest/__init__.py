"""The serving package's `rest/` layer: see docs/architecture.md."""
