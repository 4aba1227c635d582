"""The pipeline stages as plain functions, and what they need: fingerprints, prompt wrappers, progress and tracing hooks, checkpoint discovery (docs/architecture.md)."""
