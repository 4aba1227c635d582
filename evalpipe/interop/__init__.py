"""Formats and tools of other projects, in and out: Inspect AI logs (`inspect_log`), the portable results file of
a run (`results_file`), lm-evaluation-harness tasks and results, MLflow runs (`mlflow_runs`) (docs/interop.md).
Each module imports its library only when used (they are optional extras): `import evalpipe` never pays for them."""
