"""Formats and tools of other projects, in and out: Inspect AI logs (`inspect_log`), the portable results file of
a run (`results_file`), MLflow runs (`mlflow_runs`) (docs/interop.md). lm-evaluation-harness glue needs the
metrics, so it lives above this floor: benchmarks/lm_eval_task.py, metrics/lm_eval_scoring.py, lm_eval_results.py.
Each module imports its library only when used (they are optional extras): `import evalpipe` never pays for them."""
