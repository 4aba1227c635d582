"""The Dagster code location: assets, jobs, sensors and schedules. `eval_assets.definitions.defs` is loaded."""
