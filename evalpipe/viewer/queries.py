"""What the viewer shows, as pure functions over a DuckDB connection to the warehouse views
(`Warehouse.connect()`). Parameterized SQL only; sort keys, outcomes and slice keys come from whitelists;
lists carry narrow columns (never prompts, raw outputs or trajectories) and are paged with a hard row cap.
The web app (app.py) and `evalpipe compare` both read through here, so browser and terminal agree.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from evalpipe.viewer import transcript

MAX_PAGE_SIZE = 200
MAX_PAGE = 10**9  # beyond any warehouse (and far inside DuckDB's 64-bit OFFSET); larger is refused before SQL
DEFAULT_PAGE_SIZE = 50
MAX_IDS = 1000  # sample ids in one `ids` filter (a link's address stays a sane length)
DETAIL_CHARS = 20_000  # longer texts are cut on the detail page unless `full` is asked for
OUTCOMES = ("correct", "incorrect", "unscored", "error")
SORTS = {"index": "j.sample_index, j.model", "id": "j.sample_id, j.model", "score": "j.score DESC NULLS LAST, j.sample_index",
         "latency": "r.latency_s DESC NULLS LAST, j.sample_index", "tokens": "r.output_tokens DESC NULLS LAST, j.sample_index",
         "cost": "r.cost DESC NULLS LAST, j.sample_index", "model": "j.model, j.sample_index",
         "turns": "r.turns DESC NULLS LAST, j.sample_index", "tool_calls": "r.tool_calls DESC NULLS LAST, j.sample_index"}
ROLLOUT_LIST_COLUMNS = ("rollout_status", "finish_reason", "latency_s", "output_tokens", "cost", "turns", "tool_calls",
                        "fixture_misses", "stop_reason")
USAGE_SLICE = "usage"


def _records(cur) -> list[dict[str, Any]]:
    cols = [d[0] for d in cur.description]
    return [{c: _clean(v) for c, v in zip(cols, row)} for row in cur.fetchall()]


def _clean(v: Any) -> Any:
    if isinstance(v, float) and math.isnan(v):
        return None
    return v


def _loads(s: Any, default: Any = None) -> Any:
    if not isinstance(s, str) or not s:
        return default
    try:
        return json.loads(s)
    except ValueError:
        return default


# ---- runs and partitions --------------------------------------------------------------------------------------
def partitions(con, include_tries: bool = True) -> list[dict[str, Any]]:
    """One row per (benchmark_split, model, metric) with slice `all`: value, n, unscored, errors, 95% CI, and its
    direction and rank among the models shown (docs/metrics.md "Direction"): `rank` (competition ranking, best
    first by `higher_is_better`), `tied`, `rank_label` (`=1` when tied), `value_text` (a count without decimals),
    `best` (this row holds the split's best value of the metric). Without `include_tries`, a split's try-run
    keys (`is_try_run`) are left out where it has other models."""
    import pandas as pd

    from evalpipe.metrics.aggregate import format_value, rank_by_direction, rank_label, with_directions

    rows = _records(con.execute(
        "SELECT benchmark_split, model, metric, value, n, n_unscored, n_errors, ci_low, ci_high, higher_is_better, "
        "kind FROM metrics WHERE slice = 'all' ORDER BY benchmark_split, model, metric"))
    if not include_tries:
        kept = {split: set(shown_models([r["model"] for r in rows if r["benchmark_split"] == split]))
                for split in {r["benchmark_split"] for r in rows}}
        rows = [r for r in rows if r["model"] in kept[r["benchmark_split"]]]
    if not rows:
        return rows
    df = with_directions(pd.DataFrame(rows))
    rank, tied = rank_by_direction(df, ["benchmark_split", "metric"])
    # colour the best only where there is something to beat (two or more ranked models)
    ranked = rank.notna().groupby([df["benchmark_split"], df["metric"]]).transform("sum")
    for r, hib, kind, k, t, others in zip(rows, df["higher_is_better"], df["kind"], rank, tied, ranked):
        r["higher_is_better"] = None if hib is pd.NA else bool(hib)
        r["kind"], r["rank"], r["tied"] = kind, None if k is pd.NA else int(k), bool(t)
        r["rank_label"], r["value_text"] = rank_label(k, t), format_value(r["value"], kind, ".3f")
        r["better"] = {True: "higher", False: "lower"}.get(r["higher_is_better"], "-")
        r["best"] = r["rank"] == 1 and others > 1
        if kind != "score":  # an interval is a score's (Wilson/bootstrap); a count or amount shows none
            r["ci_low"] = r["ci_high"] = None
    return rows


def is_try_run(model_key: str) -> bool:
    """A throw-away model key: `adhoc:*`, `<model>@limit<N>`, `<model>@<experiment>` (evalpipe/core/run_marks.py)."""
    from evalpipe.core.run_marks import is_try_run as try_run

    return try_run(model_key)


def shown_models(keys: list[str], include_tries: bool = False) -> list[str]:
    """The keys a picker or chart offers: try runs left out unless asked, or unless they are all there is (a
    first `evalpipe run --limit 5` must not read as an empty warehouse)."""
    kept = [k for k in keys if include_tries or not is_try_run(k)]
    return kept if kept else list(keys)


def splits(con) -> list[str]:
    return [r[0] for r in con.execute("SELECT DISTINCT benchmark_split FROM judgements ORDER BY 1").fetchall()]


def models(con, split: str | None = None, include_tries: bool = True) -> list[str]:
    if split:
        cur = con.execute("SELECT DISTINCT model FROM judgements WHERE benchmark_split = ? ORDER BY 1", [split])
    else:
        cur = con.execute("SELECT DISTINCT model FROM judgements ORDER BY 1")
    return shown_models([r[0] for r in cur.fetchall()], include_tries)


def tool_names(con, split: str) -> list[str]:
    """Names of the tools called on the split, for the sample list's tool filter."""
    return [r[0] for r in con.execute("SELECT DISTINCT name FROM tool_calls WHERE benchmark_split = ? "
                                      "AND name IS NOT NULL ORDER BY 1", [split]).fetchall()]


def stop_reasons(con, split: str) -> list[str]:
    """Why the split's conversations ended (`final`, `max_turns`, `timeout`, ...), for the stop-reason filter."""
    return [r[0] for r in con.execute("SELECT DISTINCT stop_reason FROM rollouts WHERE benchmark_split = ? "
                                      "AND stop_reason IS NOT NULL ORDER BY 1", [split]).fetchall()]


def metric_names(con, split: str, model: str | None = None) -> list[str]:
    sql, params = "SELECT DISTINCT metric FROM judgements WHERE benchmark_split = ?", [split]
    if model:
        sql += " AND model = ?"
        params.append(model)
    names = [r[0] for r in con.execute(sql + " ORDER BY 1", params).fetchall()]
    # the official metric first: lenient ones (includes, choice, ...) after it
    from evalpipe.metrics.lenient import is_lenient

    return sorted(names, key=lambda m: (is_lenient(m), m))


def slice_values(con, split: str) -> list[str]:
    """`key=value` for every slice attribute of the split's samples (e.g. level=1), for the filter menu."""
    # from the judgements (complete per partition), not `datasets`, which holds the split's latest load only
    rows = con.execute("SELECT DISTINCT slices FROM judgements WHERE benchmark_split = ? AND slices IS NOT NULL "
                       "LIMIT 1000", [split]).fetchall()
    out = set()
    for (s,) in rows:
        for k, v in (_loads(s, {}) or {}).items():
            out.add(f"{k}={v}")
    return sorted(out)


# ---- the sample list --------------------------------------------------------------------------------------------
@dataclass
class SampleFilter:
    split: str
    metric: str | None = None
    model: str | None = None
    outcome: str | None = None  # correct | incorrect | unscored | error
    slice: str | None = None  # key=value
    q: str | None = None  # free text: sample id, prompt (the question), prediction, target, reason
    tool: str | None = None  # samples that called this tool
    fixture_miss: bool = False  # samples with a tool call that missed its fixture
    stop: str | None = None  # the conversation's stop reason
    models: list[str] | None = None  # with no `model`: only these models' rows (try runs left out)
    ids: list[str] | None = None  # only these sample ids (a gate's link to the samples that failed it)
    sort: str = "index"
    page: int = 1
    page_size: int = DEFAULT_PAGE_SIZE


@dataclass
class SamplePage:
    rows: list[dict[str, Any]]
    total: int
    page: int
    page_size: int
    metric: str | None
    filters: dict[str, Any] = field(default_factory=dict)

    @property
    def pages(self) -> int:
        return max(1, math.ceil(self.total / self.page_size))


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _like(text: str) -> str:
    return "%" + text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _has_call(condition: str) -> str:
    """The sample made a tool call matching `condition` (over the `tool_calls` rows, alias t)."""
    return ("EXISTS (SELECT 1 FROM tool_calls t WHERE t.benchmark_split = j.benchmark_split AND t.model = j.model "
            f"AND t.sample_id = j.sample_id AND {condition})")


def samples(con, f: SampleFilter) -> SamplePage:
    """A page of samples with the chosen metric's verdict, filtered. Raises ValueError on a bad filter."""
    metric = f.metric
    if not metric:
        names = metric_names(con, f.split, f.model)
        metric = names[0] if names else None
    if f.outcome and f.outcome not in OUTCOMES:
        raise ValueError(f"outcome must be one of {', '.join(OUTCOMES)}")
    if f.sort not in SORTS:
        raise ValueError(f"sort must be one of {', '.join(SORTS)}")
    size, page = f.page_size, f.page
    if not isinstance(size, int) or not 1 <= size <= MAX_PAGE_SIZE:
        raise ValueError(f"page_size must be between 1 and {MAX_PAGE_SIZE}, got {_short(size)}")
    if not isinstance(page, int) or not 1 <= page <= MAX_PAGE:
        raise ValueError(f"page must be between 1 and {MAX_PAGE}, got {_short(page)}")
    where = ["j.benchmark_split = ?", "j.metric = ?"]
    params: list[Any] = [f.split, metric]
    if f.model:
        where.append("j.model = ?")
        params.append(f.model)
    elif f.models is not None:
        where.append(f"j.model IN ({', '.join('?' for _ in f.models) or 'NULL'})")
        params += list(f.models)
    if f.ids is not None:
        if len(f.ids) > MAX_IDS:
            raise ValueError(f"ids lists at most {MAX_IDS} sample ids, got {len(f.ids)}")
        where.append(f"j.sample_id IN ({', '.join('?' for _ in f.ids) or 'NULL'})")
        params += list(f.ids)
    if f.outcome == "correct":
        where.append("j.correct AND j.status = 'scored'")
    elif f.outcome == "incorrect":
        where.append("j.status = 'scored' AND NOT coalesce(j.correct, FALSE)")
    elif f.outcome == "unscored":
        where.append("j.status = 'unscored'")
    elif f.outcome == "error":
        where.append("(j.status IN ('error', 'parse_error') OR (coalesce(r.status, 'ok') <> 'ok' AND j.status <> 'unscored'))")
    if f.slice:
        key, sep, value = f.slice.partition("=")
        if not sep or f.slice not in slice_values(con, f.split):
            raise ValueError(f"unknown slice {f.slice!r}; known: {', '.join(slice_values(con, f.split)) or 'none'}")
        where.append("json_extract_string(j.slices, ?) = ?")
        params += ["$." + json.dumps(key), value]
    if f.q:
        like = _like(f.q)
        # the prompt text holds the question (the rendered messages), so a word of the question finds its samples
        where.append("(j.sample_id ILIKE ? ESCAPE '\\' OR j.prediction ILIKE ? ESCAPE '\\' "
                     "OR j.target ILIKE ? ESCAPE '\\' OR j.reason ILIKE ? ESCAPE '\\' "
                     "OR j.prompt_text ILIKE ? ESCAPE '\\')")
        params += [like] * 5
    if f.tool:
        known = tool_names(con, f.split)
        if f.tool not in known:
            raise ValueError(f"unknown tool {f.tool!r} on {f.split}; called: {', '.join(known) or 'none'}")
        where.append(_has_call("t.name = ?"))
        params.append(f.tool)
    if f.fixture_miss:
        where.append(_has_call("t.fixture_hit = FALSE"))
    if f.stop:
        known = stop_reasons(con, f.split)
        if f.stop not in known:
            raise ValueError(f"unknown stop reason {f.stop!r} on {f.split}; known: {', '.join(known) or 'none'}")
        where.append("r.stop_reason = ?")
        params.append(f.stop)
    # Two steps, so a page stays fast at 100k+ samples: the page's keys from judgements (joined to rollouts only
    # when a filter or the sort needs them), then the narrow rollout columns for those keys only.
    need_rollouts = f.outcome == "error" or bool(f.stop) or f.sort in ("latency", "tokens", "cost", "turns",
                                                                         "tool_calls")
    join_r = ("LEFT JOIN rollouts r ON r.benchmark_split = j.benchmark_split AND r.model = j.model "
              "AND r.sample_id = j.sample_id") if need_rollouts else ""
    prompt_text = ", d.prompt_text" if f.q else ""  # (read only for a search: prompts are the widest column)
    base = f"""
        FROM (SELECT jj.*, d.sample_index{prompt_text} FROM judgements jj
              LEFT JOIN prompts d ON d.benchmark_split = jj.benchmark_split AND d.model = jj.model
                   AND d.sample_id = jj.sample_id
              WHERE jj.benchmark_split = ? AND jj.metric = ?) j
        {join_r}
        WHERE {' AND '.join(where)}"""
    params = [f.split, metric] + params
    total = con.execute(f"SELECT count(*) {base}", params).fetchone()[0]
    last = max(1, math.ceil(total / size))
    if page > last:  # an empty page past the end would read as "no samples"
        raise ValueError(f"page {page} is past the last page ({last}) of {total} sample(s) at page_size {size}")
    rows = _records(con.execute(
        f"""SELECT j.sample_index, j.sample_id, j.model, j.score, j.correct, j.status AS verdict, j.reason,
                   left(j.prediction, 200) AS prediction, left(j.target, 200) AS target, j.slices
            {base} ORDER BY {SORTS[f.sort]} LIMIT ? OFFSET ?""", params + [size, (page - 1) * size]))
    extra: dict[tuple[str, str], dict[str, Any]] = {}
    if rows:
        keys = sorted({r["sample_id"] for r in rows})
        for e in _records(con.execute(
                "SELECT model, sample_id, status AS rollout_status, finish_reason, latency_s, output_tokens, cost, "
                "turns, tool_calls, fixture_misses, stop_reason "
                f"FROM rollouts WHERE benchmark_split = ? AND sample_id IN ({', '.join('?' for _ in keys)})",
                [f.split, *keys])):
            extra[(e["model"], e["sample_id"])] = e
    for r in rows:
        e = extra.get((r["model"], r["sample_id"]), {})
        for k in ROLLOUT_LIST_COLUMNS:
            r[k] = e.get(k)
    for r in rows:
        r["slices"] = _loads(r["slices"], {})
        r["outcome"] = outcome_of(r["verdict"], r["correct"], r["rollout_status"])
    return SamplePage(rows=rows, total=int(total), page=page, page_size=size, metric=metric,
                      filters={"split": f.split, "metric": metric, "model": f.model, "outcome": f.outcome,
                               "slice": f.slice, "q": f.q, "tool": f.tool,
                               "fixture_miss": 1 if f.fixture_miss else None, "stop": f.stop,
                               "ids": ",".join(f.ids) if f.ids is not None else None, "sort": f.sort,
                               # (the pager's links keep a chosen size; the default is left out of them)
                               "page_size": size if size != DEFAULT_PAGE_SIZE else None})


def outcome_of(verdict: str | None, correct: Any, rollout_status: str | None) -> str:
    """One word per sample: error (judge or rollout failed), unscored (no ground truth), correct, incorrect."""
    if verdict in ("error", "parse_error"):
        return "error"
    if verdict == "unscored":
        return "unscored"
    if rollout_status not in (None, "ok"):
        return "error"
    return "correct" if correct else "incorrect"


# ---- one sample ---------------------------------------------------------------------------------------------------
def _cut(text: Any, full: bool) -> tuple[Any, bool]:
    if isinstance(text, str) and not full and len(text) > DETAIL_CHARS:
        return text[:DETAIL_CHARS], True
    return text, False


# [tau2] a conversation with a simulated user: whose turn each message is
INTERACTIVE_ROLES = {"assistant": "agent", "user": "user (simulated)"}


def interactive(trajectory: Any, prompt_messages: int) -> bool:
    """True when a user turn follows the prompt's messages: someone (a simulated user) answered during the run."""
    return any(isinstance(m, dict) and m.get("role") == "user" for m in (trajectory or [])[prompt_messages:])


def judge_usage_of(details: Any) -> dict[str, Any] | None:
    """[spend] A verdict's judge calls summed: calls sent, cached, tokens in/out, cost; None without judge usage."""
    from evalpipe.metrics.aggregate import judge_calls_of

    calls = judge_calls_of(details)
    if not calls:
        return None
    sent = [c for c in calls if not c.get("cached")]
    return {"calls": len(sent), "cached": len(calls) - len(sent),
            "input_tokens": sum(int(c.get("input_tokens") or 0) for c in sent),
            "output_tokens": sum(int(c.get("output_tokens") or 0) for c in sent),
            "cost": sum(float(c.get("cost") or 0.0) for c in sent),
            "latency_s": sum(float(c.get("latency_s") or 0.0) for c in sent)}


def sample(con, split: str, model: str, sample_id: str, full: bool = False) -> dict[str, Any] | None:
    """Everything about one sample of one model: prompt messages, output, trajectory and tool calls, every
    metric's verdict and reason, finish reason, tokens, cost, latency. Long texts are cut unless `full`."""
    p = _records(con.execute(
        "SELECT sample_index, messages, prompt_text, target, metadata, slices, tools FROM prompts "
        "WHERE benchmark_split = ? AND model = ? AND sample_id = ?", [split, model, sample_id]))
    r = _records(con.execute(
        "SELECT * EXCLUDE (benchmark_split, model, sample_id) FROM rollouts "
        "WHERE benchmark_split = ? AND model = ? AND sample_id = ?", [split, model, sample_id]))
    j = _records(con.execute(
        "SELECT metric, score, correct, status, reason, prediction, normalized_prediction, target, normalized_target, "
        "details FROM judgements WHERE benchmark_split = ? AND model = ? AND sample_id = ? ORDER BY metric",
        [split, model, sample_id]))
    if not (p or r or j):
        return None
    t = _records(con.execute(
        "SELECT turn, call_index, name, arguments, arguments_valid, result, fixture_hit, error, latency_s "
        "FROM tool_calls WHERE benchmark_split = ? AND model = ? AND sample_id = ? ORDER BY call_index",
        [split, model, sample_id]))
    prompt = p[0] if p else {}
    roll = r[0] if r else {}
    truncated = {}
    for key in ("raw_output", "raw_response", "error"):
        roll[key], truncated[key] = _cut(roll.get(key), full)
    trajectory = _loads(roll.pop("trajectory", None), []) or []
    traj_text = json.dumps(trajectory, ensure_ascii=False)
    if not full and len(traj_text) > DETAIL_CHARS * 5:
        trajectory, truncated["trajectory"] = trajectory[:50], True
    for call in t:
        call["result"], cut = _cut(call.get("result"), full)
        truncated["tool_calls"] = truncated.get("tool_calls", False) or cut
    events = transcript.build(trajectory, t, complete=not truncated.get("trajectory"))
    roll.pop("tool_trace", None)  # the same records as the tool_calls table, shown from there
    for v in j:
        v["details"] = _loads(v["details"], None)
        v["judge_usage"] = judge_usage_of(v["details"])  # [spend] its judge calls, beside the rollout's cost
    messages = _loads(prompt.get("messages"), []) or []
    for m in messages:
        if isinstance(m.get("content"), str):
            m["content"], cut = _cut(m["content"], full)
            truncated["messages"] = truncated.get("messages", False) or cut
    return {
        "benchmark_split": split, "model": model, "sample_id": sample_id,
        "sample_index": prompt.get("sample_index"), "target": prompt.get("target"),
        "messages": messages, "tools": _loads(prompt.get("tools"), None),
        "metadata": _loads(prompt.get("metadata"), {}), "slices": _loads(prompt.get("slices"), {}),
        "rollout": roll, "truncated_output": roll.get("finish_reason") == "length",
        "trajectory": trajectory, "tool_calls": t, "verdicts": j, "transcript": events,
        "role_names": INTERACTIVE_ROLES if interactive(trajectory, len(messages)) else None,
        "n_calls": sum(1 for e in events if e["kind"] == "call"),
        "cut": sorted(k for k, v in truncated.items() if v),
    }


# ---- two models compared ------------------------------------------------------------------------------------------
def compare(con, split: str, model_a: str, model_b: str, metric: str | None = None, limit: int = 200) -> dict[str, Any]:
    """Paired comparison on the samples both models were scored on: counts of both right / only A / only B /
    both wrong, the exact McNemar test (a two-sided binomial test on the discordant pairs, scipy), and the
    samples where they disagree (A right and B wrong first)."""
    common = [m for m in metric_names(con, split, model_a) if m in set(metric_names(con, split, model_b))]
    if not metric:
        if not common:
            raise ValueError(f"{model_a} and {model_b} share no metric on {split}")
        metric = common[0]
    values = aggregate_values(con, split, metric, (model_a, model_b))
    if metric not in common:  # a partition row (e.g. tool_integration_control_contamination_rate): no per-sample pairs
        if len(values["values"]) < 2:
            raise ValueError(f"{model_a} and {model_b} do not both have {metric!r} on {split}; shared per-sample "
                             f"metrics: {', '.join(common) or 'none'}")
        return {"benchmark_split": split, "metric": metric, "model_a": model_a, "model_b": model_b,
                "n_paired": None, "both_correct": None, "only_a": None, "only_b": None, "both_wrong": None,
                "accuracy_a": None, "accuracy_b": None, "mcnemar_p": None, "only_a_samples": [], "only_b_samples": [],
                **_better(values, model_a, model_b)}
    rows = _records(con.execute(
        """SELECT a.sample_id, d.sample_index, a.correct AS a_correct, b.correct AS b_correct,
                  left(a.prediction, 160) AS a_prediction, left(b.prediction, 160) AS b_prediction,
                  left(a.target, 160) AS target
           FROM judgements a
           JOIN judgements b ON b.benchmark_split = a.benchmark_split AND b.sample_id = a.sample_id
                AND b.metric = a.metric AND b.model = ?
           LEFT JOIN prompts d ON d.benchmark_split = a.benchmark_split AND d.model = a.model
                AND d.sample_id = a.sample_id
           WHERE a.benchmark_split = ? AND a.metric = ? AND a.model = ?
                 AND a.status <> 'unscored' AND b.status <> 'unscored'
           ORDER BY d.sample_index, a.sample_id""", [model_b, split, metric, model_a]))
    both = sum(1 for r in rows if r["a_correct"] and r["b_correct"])
    only_a = [r for r in rows if r["a_correct"] and not r["b_correct"]]
    only_b = [r for r in rows if r["b_correct"] and not r["a_correct"]]
    neither = len(rows) - both - len(only_a) - len(only_b)
    n = len(rows)
    return {
        "benchmark_split": split, "metric": metric, "model_a": model_a, "model_b": model_b, "n_paired": n,
        "both_correct": both, "only_a": len(only_a), "only_b": len(only_b), "both_wrong": neither,
        "accuracy_a": (both + len(only_a)) / n if n else None, "accuracy_b": (both + len(only_b)) / n if n else None,
        "mcnemar_p": mcnemar_p(len(only_a), len(only_b)),
        "only_a_samples": only_a[:limit], "only_b_samples": only_b[:limit],
        **_better(values, model_a, model_b),
    }


def aggregate_values(con, split: str, metric: str, models_: tuple[str, ...]) -> dict[str, Any]:
    """The metric's slice-`all` value per model and its direction (declared, or stored with the rows)."""
    rows = _records(con.execute(
        f"SELECT model, value FROM metrics WHERE benchmark_split = ? AND metric = ? "
        f"AND slice = 'all' AND model IN ({', '.join('?' for _ in models_)})", [split, metric, *models_]))
    hib, kind = direction(con, split, metric)
    return {"values": {r["model"]: r["value"] for r in rows}, "higher_is_better": hib, "kind": kind}


def _better(values: dict[str, Any], a: str, b: str) -> dict[str, Any]:
    """value_a, value_b, the direction, and `better`: the model with the better value by direction, `tie`, or
    None (a value missing, or a metric with no better side)."""
    va, vb, hib = values["values"].get(a), values["values"].get(b), values["higher_is_better"]
    better = None
    if va is not None and vb is not None and hib is not None:
        better = "tie" if va == vb else (a if (va > vb) == bool(hib) else b)
    return {"value_a": va, "value_b": vb, "higher_is_better": hib, "kind": values["kind"], "better": better,
            "direction": {True: "higher is better", False: "lower is better"}.get(hib, "no better side")}


def mcnemar_p(only_a: int, only_b: int) -> float | None:
    """Exact McNemar p-value: two-sided binomial test of the discordant pairs against 1/2 (scipy)."""
    if only_a + only_b == 0:
        return None
    from scipy.stats import binomtest

    return float(binomtest(only_a, only_a + only_b, 0.5, alternative="two-sided").pvalue)


# ---- chart data ---------------------------------------------------------------------------------------------------
def primary_metric(con, split: str) -> str | None:
    names = metric_names(con, split)
    return names[0] if names else None


def heatmap(con, include_tries: bool = False) -> dict[str, Any]:
    """models x benchmark splits: each split's official (first non-lenient) metric, slice `all`; try-run keys
    left out unless `include_tries` (or unless they are all there is)."""
    cells, directions = {}, {}
    for s in splits(con):
        m = primary_metric(con, s)
        for r in _records(con.execute("SELECT model, value FROM metrics WHERE benchmark_split = ? AND metric = ? "
                                      "AND slice = 'all'", [s, m])):
            cells[(r["model"], f"{s} ({m})")] = r["value"]
            directions[f"{s} ({m})"] = (s, m)
    kept = set(shown_models(sorted({k[0] for k in cells}), include_tries))
    cells = {k: v for k, v in cells.items() if k[0] in kept}
    directions = {c: directions[c] for c in {k[1] for k in cells}}
    models_ = sorted({k[0] for k in cells})
    cols = sorted({k[1] for k in cells})
    dirs = [direction(con, *directions[c]) for c in cols]
    return {"models": models_, "columns": cols,
            "values": [[cells.get((m, c)) for c in cols] for m in models_],
            "higher_is_better": [d[0] for d in dirs], "kinds": [d[1] for d in dirs]}


def direction(con, split: str, metric: str) -> tuple[bool | None, str]:
    """(higher_is_better, kind) of a metric on a split: as stored with its rows, else as declared (partitions
    written before the columns existed)."""
    from evalpipe.metrics.base import direction_of

    row = con.execute("SELECT higher_is_better, kind FROM metrics WHERE benchmark_split = ? AND metric = ? "
                      "AND kind IS NOT NULL LIMIT 1", [split, metric]).fetchone()
    if row is not None:
        return row[0], row[1]
    d = direction_of(metric)
    return d.higher_is_better, d.kind


def _shown_rows(rows: list[dict[str, Any]], include_tries: bool) -> list[dict[str, Any]]:
    kept = set(shown_models(sorted({r["model"] for r in rows}), include_tries))
    return [r for r in rows if r["model"] in kept]


def slice_bars(con, split: str, metric: str, include_tries: bool = True) -> list[dict[str, Any]]:
    """Per model and slice (all, level=1, ...): value and 95% CI."""
    return _shown_rows(_records(con.execute(
        "SELECT model, slice, value, ci_low, ci_high, n FROM metrics WHERE benchmark_split = ? AND metric = ? "
        "AND slice <> ? ORDER BY slice = 'all' DESC, slice, model", [split, metric, USAGE_SLICE])), include_tries)


def cost_accuracy(con, split: str, metric: str, include_tries: bool = True) -> list[dict[str, Any]]:
    """Per model: the metric (slice all) and the partition's total cost and output tokens, and the judges' calls,
    tokens and cost beside them ([spend]: null where no judge recorded usage)."""
    usage = {"cost_usd": "cost_usd_total", "output_tokens": "output_tokens_total", "input_tokens": "input_tokens_total",
             "judge_calls": "judge_calls", "judge_input_tokens": "judge_input_tokens_total",
             "judge_output_tokens": "judge_output_tokens_total", "judge_cost_usd": "judge_cost_usd_total"}
    cols = ", ".join(f"{a}.value AS {a}" for a in usage)
    joins = "\n".join(f"LEFT JOIN metrics {a} ON {a}.benchmark_split = m.benchmark_split AND {a}.model = m.model "
                      f"AND {a}.metric = '{name}' AND {a}.slice = ?" for a, name in usage.items())
    return _shown_rows(_records(con.execute(
        f"""SELECT m.model, m.value, m.ci_low, m.ci_high, {cols}
           FROM metrics m
           {joins}
           WHERE m.benchmark_split = ? AND m.metric = ? AND m.slice = 'all' ORDER BY m.model""",
        [USAGE_SLICE] * len(usage) + [split, metric])), include_tries)
