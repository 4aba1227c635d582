"""The tool-integration gates of one partition, for the Dagster asset check and the CLI (exit 3).

`gate_outcome(judgements)` re-reads the per-sample result records (`details` of the `tool_integration`
judgements) and judges the dataset header's gates: `passed` only when every gate passes; severity ERROR when a gate
marked `blocking` fails (the CLI then exits 3), WARN when only non-blocking gates fail or a gate is "insufficient"
(fewer eligible items than `min_eligible_for_gates`: never a pass).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from evalpipe.tooleval import report


@dataclass
class GateOutcome:
    applicable: bool
    passed: bool = True
    error: bool = False  # a blocking gate failed
    gates: list[dict[str, Any]] = field(default_factory=list)

    @property
    def description(self) -> str:
        if not self.applicable:
            return "no tool_integration judgements in this partition"
        return "; ".join(f"{g['gate']}: {g['status']}" + (f" ({g['value']:.4g})" if g.get("value") is not None else "")
                         for g in self.gates) or "no gates"


def gate_outcome(judgements: pd.DataFrame) -> GateOutcome:
    j = judgements[judgements["metric"] == report.METRIC] if len(judgements) else judgements
    if not len(j):
        return GateOutcome(applicable=False)
    results = []
    for d in j["details"]:
        try:
            rec = json.loads(d) if isinstance(d, str) and d else {}
        except ValueError:
            rec = {}
        if rec.get("result_version"):
            results.append(rec)
    if not results:
        return GateOutcome(applicable=True, passed=False, gates=[])
    settings = results[0].get("settings") or {}
    summary = report.summarize(results, int(settings.get("integration_span_cap") or 8))
    gates = report.evaluate_gates(summary, settings)
    passed = all(g["status"] == "pass" for g in gates)
    error = any(g["status"] == "fail" and g["blocking"] for g in gates)
    return GateOutcome(applicable=True, passed=passed, error=error, gates=gates)
