"""Storage: the DuckDB warehouse, resume journals, run artifacts, Dagster instance storage, object storage, shared rate-limit and lock state (docs/architecture.md)."""
