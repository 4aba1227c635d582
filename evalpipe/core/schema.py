"""Column schemas of the warehouse tables.

Every partition file of a table is written with exactly these columns and types, so partitions written by
different processes or versions always union cleanly, and an empty table still has its columns.
Free-form structures (metadata, messages, trajectories, details) are JSON strings: DuckDB reads them with
`->>` / `json_extract`.
"""
from __future__ import annotations

import pyarrow as pa

S, I, F, B = pa.string(), pa.int64(), pa.float64(), pa.bool_()

PARTITION_COLUMNS = ("benchmark_split", "model")

TABLES: dict[str, pa.Schema] = {
    "datasets": pa.schema([
        ("benchmark_split", S), ("sample_id", S), ("sample_index", I), ("input", S), ("target", S),
        ("choices", S), ("system", S), ("files", S), ("metadata", S), ("slices", S),
        ("messages", S),  # JSON list of chat messages when the dataset gives them natively (columns: {messages: ...})
        ("tools", S),  # JSON list of the sample's own tool schemas (columns: {tools: ...}); null when none
    ]),
    "prompts": pa.schema([
        ("benchmark_split", S), ("model", S), ("sample_id", S), ("sample_index", I), ("messages", S),
        ("prompt_text", S), ("target", S), ("files", S), ("metadata", S), ("slices", S), ("prompt_fingerprint", S),
        ("tools", S),  # JSON list of OpenAI function-tool schemas (dataset names), null when the sample has none
    ]),
    "rollouts": pa.schema([
        ("benchmark_split", S), ("model", S), ("sample_id", S), ("fingerprint", S), ("status", S), ("error", S),
        ("prediction", S), ("raw_output", S), ("finish_reason", S), ("latency_s", F), ("input_tokens", I),
        ("output_tokens", I), ("cost", F), ("attempts", I), ("cached", B), ("trajectory", S),
        ("raw_response", S),  # the provider's response body (JSON text) as received
        # multi-turn conversations (docs/interfaces.md); null for one-shot requests
        ("turns", I), ("tool_calls", I), ("invalid_args", I), ("fixture_misses", I), ("stop_reason", S),
        ("tool_trace", S),  # JSON list of this sample's tool-call records (the `tool_calls` table's rows)
    ]),
    # one row per tool call the model made (docs/interfaces.md, docs/tools.md)
    "tool_calls": pa.schema([
        ("benchmark_split", S), ("model", S), ("sample_id", S), ("turn", I), ("call_index", I), ("name", S),
        ("arguments", S), ("arguments_valid", B), ("normalized_key", S), ("result", S), ("fixture_hit", B),
        ("error", S), ("latency_s", F),
    ]),
    # per-partition fingerprints of every input that can change a number (docs/interfaces.md)
    "fingerprints": pa.schema([
        ("benchmark_split", S), ("model", S), ("dataset_sha256", S), ("tool_registry_sha256", S),
        ("tokenizer_fingerprint", S), ("prompt_wrapper_sha256", S), ("runner_fingerprint", S),
        ("model_fingerprint", S), ("recorded_at", S),
        ("params", S),  # the decoding params and seed the run used (overrides included), canonical JSON
    ]),
    "judgements": pa.schema([
        ("benchmark_split", S), ("model", S), ("sample_id", S), ("metric", S), ("score", F), ("correct", B),
        ("status", S), ("reason", S), ("prediction", S), ("normalized_prediction", S), ("target", S),
        ("normalized_target", S), ("slices", S), ("details", S), ("judge_fingerprint", S),
    ]),
    "metrics": pa.schema([
        ("benchmark_split", S), ("model", S), ("metric", S), ("slice", S), ("value", F), ("n", I),
        ("n_unscored", I), ("n_errors", I), ("stderr", F), ("ci_low", F), ("ci_high", F),
        # how to read the value (evalpipe/metrics/base.py Direction): higher_is_better null = no better side;
        # kind score | count | amount. Null in both: a partition written before they existed (readers fill them)
        ("higher_is_better", B), ("kind", S),
    ]),
    "leaderboard": pa.schema([
        ("model", S), ("benchmark_split", S), ("metric", S), ("value", F), ("n", I), ("n_unscored", I),
        ("n_errors", I), ("stderr", F), ("ci_low", F), ("ci_high", F), ("rank", I),
        # rank: competition ranking (1, 1, 3) by direction; tied: the rank is shared
        ("higher_is_better", B), ("kind", S), ("tied", B),
        # gate: why the partition is not ranked (a failed blocking gate, docs/metrics.md "Gates"); null when ranked
        ("gate", S),
    ]),
    # the latest outcome of each blocking gate (Dagster blocking asset check) per partition (eval_assets/checks.py)
    "gates": pa.schema([
        ("benchmark_split", S), ("model", S), ("check", S), ("passed", B), ("severity", S), ("description", S),
        ("checked_at", S),
    ]),
    # people's (and judges') reviews, append-only: one partition file per review (benchmark_split, review_id), never
    # rewritten (docs/viewer.md "Reviews"). kind verdict: `verdict` right | wrong on (model, sample_id), `rubric` JSON
    # {criterion: score}; kind pairwise: `preference` a | b | tie between `model` (a) and `model_b` (b), `shown_left`
    # the one shown on the left. source: person | judge (reviewer = the judge's model key)
    "reviews": pa.schema([
        ("review_id", S), ("benchmark_split", S), ("reviewer", S), ("source", S), ("created_at", S), ("kind", S),
        ("sample_id", S), ("model", S), ("model_b", S), ("verdict", S), ("rubric", S), ("preference", S),
        ("shown_left", S), ("comment", S),
    ]),
    # derived from `reviews` by the `reviews` asset (eval_assets/reviews.py), each rewritten whole at its
    # materialization. review_metrics: the judges' calibration against people as metrics-shaped rows
    # (`<metric>_human_agreement` with a Wilson interval, `<metric>_human_kappa`) per partition, judge and fingerprint
    "review_metrics": pa.schema([
        ("benchmark_split", S), ("model", S), ("metric", S), ("slice", S), ("value", F), ("n", I), ("ci_low", F),
        ("ci_high", F), ("higher_is_better", B), ("kind", S), ("judge", S), ("fingerprint", S), ("reviewers", I),
    ]),
    # review_ranking: the Bradley-Terry ranking per split and source (all | person | judge); a refused fit is rows
    # with no strength and the reason in `note`
    "review_ranking": pa.schema([
        ("benchmark_split", S), ("source", S), ("rank", I), ("model", S), ("strength", F), ("ci_low", F),
        ("ci_high", F), ("wins", F), ("comparisons", I), ("n", I), ("resamples", I), ("resamples_fitted", I),
        ("note", S),
    ]),
    # Inspect `.eval` logs imported by `evalpipe import inspect` (evalpipe/interop/inspect_stream.py, docs/interop.md
    # "Large logs"): one partition file per log (`log` = the log's file name), replaced whole by a re-import
    "inspect_samples": pa.schema([
        ("log", S), ("id", S), ("epoch", I), ("input", S), ("target", S), ("output", S), ("error", S),
        ("input_tokens", I), ("output_tokens", I), ("total_time", F),
    ]),
    "inspect_scores": pa.schema([("log", S), ("id", S), ("epoch", I), ("scorer", S), ("value", F), ("answer", S)]),
}

# asset name -> warehouse table (the `dataset` asset fills the `datasets` table)
ASSET_TABLES = {"dataset": "datasets", "prompts": "prompts", "rollouts": "rollouts",
                "judgements": "judgements", "metrics": "metrics", "leaderboard": "leaderboard"}
