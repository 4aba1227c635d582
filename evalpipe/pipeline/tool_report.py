"""A partition's tool-integration report (`tool_integration_report.json` in its run folder): the glue between the
config, the warehouse, the split's adapter (its header settings) and evalpipe/tooleval/report.py, which builds the
report from them. Here, above the domain packages, because it needs both the adapters and the tool evaluation.
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import pandas as pd

from evalpipe.benchmarks import adapter_for
from evalpipe.tooleval.report import METRIC, build_report, write_report


def _fingerprints(wh: Any, split_key: str, model_key: str) -> dict[str, Any]:
    try:
        df = wh.query(f"select * from fingerprints where benchmark_split = '{split_key}' and model = '{model_key}'")
    except Exception:  # no fingerprints table yet
        return {}
    if df is None or not len(df):
        return {}
    row = df.sort_values("recorded_at").iloc[-1].to_dict() if "recorded_at" in df else df.iloc[-1].to_dict()
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}


def write_partition_report(cfg: Any, split_key: str, model_key: str, wh: Any, judgements: pd.DataFrame,
                           started_at: float | None, folder: Path) -> Path | None:
    """Build and write `tool_integration_report.json` into the partition's artifact folder; None when the partition
    has no tool_integration judgements. Wall time: from the run's start to now."""
    if not len(judgements) or not (judgements["metric"] == METRIC).any():
        return None
    split, model = cfg.split(split_key), cfg.model(model_key)
    wall = (time.time() - started_at) if started_at else None
    adapter = adapter_for(split)
    header = adapter.header_settings() if hasattr(adapter, "header_settings") else {}
    rep = build_report(split, model, judgements, wall, _fingerprints(wh, split_key, model_key), header)
    return write_report(rep, folder) if rep is not None else None
