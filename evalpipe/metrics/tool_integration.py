"""`tool_integration`: the tool-integration harness's verdict on one sample, and its partition rows.

Per sample (`adapter: tool_integration` puts the item in the metadata): the result record of
`evalpipe.tooleval.integration.analyze` (validated against eval_result.schema.json) goes to `details`; the score is
1 when the item behaved for its kind (integration: integrates a received result and states nothing ungrounded;
control: integrates nothing; negative_control: presents nothing as tool-derived; locale_probe: renders the value in
its locale). Per partition (`summary_rows`): every metric of docs/metrics.md as `tool_integration_<name>` rows,
per-tool strict-minus-lax deltas, the span histogram and the gates.
"""
from __future__ import annotations

import json
from typing import Any

import pandas as pd

from evalpipe.metrics.base import COUNT, Direction, JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import ToolIntegrationSettings
from evalpipe.tooleval import integration, report
from evalpipe.tooleval.dataset import DEFAULTS, validate_result
from evalpipe.core.types import Score


def settings_of(md: dict[str, Any], min_eligible: int | None = None) -> dict[str, Any]:
    """The gate settings: the sample's (its dataset header's, else the defaults); `min_eligible` (the metric's
    setting, from the split option) over the header's."""
    header_min = md.get("min_eligible_for_gates") or DEFAULTS["min_eligible_for_gates"]
    return {"integration_span_cap": int(md.get("integration_span_cap") or DEFAULTS["integration_span_cap"]),
            "min_eligible_for_gates": int(min_eligible if min_eligible is not None else header_min),
            "lax_threshold": float(md.get("lax_threshold") or DEFAULTS["lax_threshold"]),
            "gates": md.get("gates") or DEFAULTS["gates"]}


@register_metric("tool_integration")
class ToolIntegration(Metric):
    name = "tool_integration"
    requires_target = False  # the item's expectations are in its metadata; controls have no target
    # the partition rows (report.metric_rows) that are not higher-is-better scores: a contaminated control or a
    # hallucination is bad, so fewer is better; counts read as counts; a histogram bin and the strict-minus-lax
    # difference have no better side (never ranked). Every other `tool_integration_<name>` is a rate, higher better.
    aggregates = {
        "control_contamination_rate": Direction(False),
        "negative_control_hallucination_rate": Direction(False),
        "controls_with_integration": Direction(False, COUNT),
        "span_cap_exceeded": Direction(False, COUNT),
        "fixture_misses": Direction(False, COUNT),
        "span_histogram": Direction(None, COUNT),
        "strict_minus_lax": Direction(None),
    }

    option_schema = ToolIntegrationSettings  # the split option of the same name sets it (benchmarks/tool_integration.py)

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        v = settings.get("min_eligible_for_gates")
        if v is not None and (type(v) is not int or v < 1):
            from evalpipe.core.errors import ConfigError

            raise ConfigError(f"tool_integration: min_eligible_for_gates must be an integer >= 1, got {v!r}")
        self.min_eligible = v

    def score(self, item: JudgeInput) -> Score:
        md = item.metadata or {}
        if "kind" not in md:
            return Score.error("no tool-integration item in the sample's metadata; load it with adapter: tool_integration")
        spec = integration.ItemSpec.from_metadata(item.sample_id, md, item.input or "")
        answer = item.prediction if item.prediction is not None else item.raw_output
        result = integration.analyze(spec, answer, item.tool_calls or [])
        result["settings"] = settings_of(md, self.min_eligible)
        validate_result(result)
        f = result["flags"]
        why = {"integration": f"{result['spans']['strict']} strict span(s); "
                              f"{'grounded' if f['grounded'] else 'not grounded'}"
                              + (f" (ungrounded: {', '.join(result['grounding']['ungrounded'][:5])})"
                                 if result["grounding"]["ungrounded"] else ""),
               "control": "control contaminated by tool content" if f["contaminated"] else "control clean",
               "negative_control": "hallucinated tool-derived content" if f["hallucinated"] else "no hallucination",
               "locale_probe": (f"locale {spec.locale}: expected {result['locale_rendering']!r} "
                                f"{'found' if f['locale_ok'] else 'missing'}")}[spec.kind]
        return Score(value=1.0 if result["ok"] else 0.0, correct=result["ok"], reason=why,
                     normalized_prediction=integration.norm_text(answer or ""), details=result)

    @staticmethod
    def summary_rows(metric: str, counted: pd.DataFrame, details: list[dict], seed: int) -> list[dict]:
        results = [d for d in details if d.get("result_version")]
        if not results:
            return []
        settings = results[0].get("settings") or settings_of({})
        summary = report.summarize(results, int(settings["integration_span_cap"]))
        gates = report.evaluate_gates(summary, settings)
        return report.metric_rows(metric, summary, gates)
