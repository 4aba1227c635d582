"""Formats and tools of other projects, in and out: Inspect AI logs, lm-evaluation-harness tasks and results,
MLflow runs (docs/interop.md). Each module imports its library only when used: they are optional extras."""
