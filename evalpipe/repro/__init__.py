"""Orchestration helpers above the Dagster layer: sharded runs and their validation (docs/architecture.md)."""
