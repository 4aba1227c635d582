"""exact_match's batch path (`score_columns`: texts normalised once per batch, numbers read only when the texts
differ) against a literal restatement of the per-row rules it replaced, over generated tricky strings; and `judge`
building its frame column by column and decoding only the JSON a metric reads."""
import asyncio
import json
import math
import random
import re
import string
import sys
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.pipeline import stages as pipeline
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.metrics import JudgeInput, Metric, build_metric, get_metric, register_metric
from evalpipe.metrics.exact_match import normalize_text
from evalpipe.metrics.numbers import parse_number, read_quantity
from evalpipe.core.types import Score

# ---- the per-row rules (docs/metrics.md, "Normalizer rules"), restated here as the reference -----------------------
_WS = re.compile(r"\s+")
_PUNCT = re.escape(string.punctuation + " ")
_EDGES = re.compile(rf"([{_PUNCT}]*)(.*?)([{_PUNCT}]*)", re.S)


def ref_normalize(s, case=False):
    s = _WS.sub(" ", s.strip())
    for minus in "\u2212\ufe63\uff0d":
        s = s.replace(minus, "-")
    if not case:
        s = s.lower()
    lead, core, trail = _EDGES.fullmatch(s).groups()
    if not core:
        return ""
    if core[0].isdigit():  # a number: its sign and point stay, and any minus before it
        kept = re.search(r"[+-]?\.?$", lead).group()
        dropped = lead[:len(lead) - len(kept)]
        if "-" in dropped:
            kept = lead[dropped.index("-"):]
    else:  # a minus glued to what follows stays
        glued = [k for k, c in enumerate(lead) if c == "-" and (lead + core)[k + 1] != " "]
        kept = lead[glued[0]:] if glued else ""
    tail = re.match(r" ?%", trail) if core[-1].isdigit() else None
    return kept + core + (tail.group() if tail else "")


_PLAIN = re.compile(r"(\d+|\d{1,3}(?:,\d{3})+|\d{1,3}(?: \d{3})+)?(\.\d*)?([eE][+-]?\d+)?")


def ref_quantity(text):
    """(value, is_percent) or None."""
    if isinstance(text, bool) or text is None:
        return None
    if isinstance(text, (int, float)):
        return (float(text), False) if math.isfinite(float(text)) else None
    s = " ".join(str(text).split())
    for minus in "\u2212\ufe63\uff0d":
        s = s.replace(minus, "-")
    percent = s.endswith("%")
    if percent:
        s = s[:-1].removesuffix(" ")
    sign = ""
    for head in ("-$ ", "+$ ", "-$", "+$", "$-", "$+", "$ -", "$ +", "-", "+", "$ ", "$"):
        if s.startswith(head):
            sign, s = head.replace("$", "").strip(), s[len(head):]
            break
    power = re.search(r" ?[×xX*·] ?10 ?(?:\^|\*\*) ?\{?([+-]?\d+)\}?$", s)  # "× 10^3" is "e3"
    if power:
        s = s[:power.start()]
    m = _PLAIN.fullmatch(s)
    if not m or not re.search(r"\d", (m.group(1) or "") + (m.group(2) or "")) or (power and m.group(3)):
        return None
    try:
        value = float(sign + s.replace(",", "").replace(" ", "") + ("e" + power.group(1) if power else ""))
    except ValueError:
        return None
    return (value, percent) if math.isfinite(value) else None


def ref_parse_number(text):
    q = ref_quantity(text)
    return q[0] if q is not None and not q[1] else None


def ref_exact_match(pred, gold, settings):
    """(correct, normalized_prediction, normalized_target), or None when unscored."""
    if gold is None:
        return None
    case, numeric = bool(settings.get("case_sensitive", False)), bool(settings.get("numeric", True))
    rel, abs_ = float(settings.get("rel_tol", 0.0)), float(settings.get("abs_tol", 0.0))
    tol = settings.get("numeric_tolerance")
    seps = str(settings.get("separators", ",;"))

    def same(p, g):
        if numeric:
            qa, qb = ref_quantity(p), ref_quantity(g)
            if qa is not None and qb is not None:
                if qa[1] != qb[1]:  # a percentage against a plain number
                    return False
                a, b = qa[0], qb[0]
                if tol is not None:
                    err = abs(a) if b == 0 else abs(a - b) / abs(b)
                    if err < float(tol):
                        return True
                return abs(a - b) <= max(rel * abs(b), abs_)
        return p == g

    if settings.get("list"):
        def split(s):
            parts = re.split("[" + re.escape(seps) + "]", s) if seps else [s]
            return [ref_normalize(x, case) for x in parts if x.strip()]
        pl, gl = split(pred or ""), split(gold)
        if settings.get("ordered"):
            ok = len(pl) == len(gl) and all(same(p, g) for p, g in zip(pl, gl))
        else:
            ps, gs = list(dict.fromkeys(pl)), list(dict.fromkeys(gl))  # as sets
            ok = len(ps) == len(gs)
            unused = list(ps)
            for g in gs if ok else []:
                hit = next((p for p in unused if same(p, g)), None)
                if hit is None:
                    ok = False
                    break
                unused.remove(hit)
        return ok, " | ".join(pl), " | ".join(gl)
    p, g = ref_normalize(pred or "", case), ref_normalize(gold, case)
    return same(p, g), p, g


# ---- generated strings -------------------------------------------------------------------------------------------
WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]  # incl. \x1c-\x1f, \x85, \u3000
FRAGMENTS = [
    "\u2212", "\u22123", "5.", "1 000", "-$", "$-", "%", "3%", "- ",  # signs, points and percents: issue 20
    " × 10^3", "x10^-2", "*10**2",
    "1", "0", "-0", "+.5", "1.0", "1.00", "10", "1,000", "1,2", "12,34", "1,234.5", "$12", "$1,000", "45%", "1e3",
    "1E-3", "-3e2", "1_000", "inf", "nan", "NaN", "-inf", "1e999", ".", "$", "%", "+", "-", "e5", "0x10",
    "٣", "١٢٣", "５", "²", "½", "Ⅻ",  # Unicode digits: \\d and float() read some of them
    "Paris", "paris", "PARIS", "İstanbul", "straße", "STRASSE", "ΣΊΣΥΦΟΣ", "é", "é", "\u200b", "日本",
    "a", "b", "c", "yes", "No", "A)", "(B)", "'x'", '"y"', "...", "!?", "#", "&", "—", "«»",
    ",", ";", " , ", ";;", "a, b", "b; a", "1, 2", "2.0,1",
]


def random_text(rng):
    parts = []
    for _ in range(rng.randint(0, 4)):
        parts.append(rng.choice(FRAGMENTS) if rng.random() < 0.75 else rng.choice(WHITESPACE) * rng.randint(1, 3))
    return "".join(parts)


def pairs(n=2500, seed=15):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        gold = None if rng.random() < 0.05 else random_text(rng)
        r = rng.random()
        if r < 0.05:
            pred = None
        elif r < 0.35 and gold is not None:  # the same answer, re-spaced or re-cased: the texts often normalise equal
            pred = rng.choice(WHITESPACE) + (gold.upper() if rng.random() < 0.3 else gold) + rng.choice(" .!")
        else:
            pred = random_text(rng)
        out.append((pred, gold))
    return out


SETTINGS = [{}, {"case_sensitive": True}, {"numeric": False}, {"rel_tol": 0.01}, {"abs_tol": 0.5},
            {"numeric_tolerance": 0.1}, {"numeric_tolerance": 0}, {"rel_tol": -1}, {"abs_tol": -1},
            {"rel_tol": float("nan")}, {"abs_tol": float("nan")}, {"rel_tol": float("inf")}, {"list": True},
            {"list": True, "ordered": True}, {"list": True, "rel_tol": -1}, {"list": True, "separators": ""}]


# out of range: refused by build_metric (and by the config's check) since issue 30; the class itself still gives the
# same verdict on both paths when built directly
REFUSED = [{"rel_tol": -1}, {"abs_tol": -1}, {"rel_tol": float("nan")}, {"abs_tol": float("nan")},
           {"rel_tol": float("inf")}, {"list": True, "rel_tol": -1}, {"list": True, "separators": ""}]


@pytest.mark.parametrize("settings", REFUSED, ids=[json.dumps(s) for s in REFUSED])
def test_out_of_range_exact_match_settings_are_refused(settings):
    with pytest.raises(ConfigError, match=r"^metric 'exact_match': setting (rel_tol|abs_tol|separators) must be "):
        build_metric({"name": "exact_match", **settings})


@pytest.mark.parametrize("settings", SETTINGS, ids=[json.dumps(s) for s in SETTINGS])
def test_exact_match_batch_and_row_paths_give_the_per_row_rules_verdicts(settings):
    metric = get_metric("exact_match")(**settings)  # directly: REFUSED settings included
    cases = pairs()
    items = [JudgeInput(f"s{i}", "q", gold, pred) for i, (pred, gold) in enumerate(cases)]
    batch = asyncio.run(metric.ascore_many(items))
    rows = [metric.score(i) for i in items]
    columns = metric.score_columns([gold for _, gold in cases], [pred for pred, _ in cases])
    assert batch == rows == [columns.row(k) for k in range(len(columns))]
    assert columns.details == [None] * len(cases)  # no details: the judgement's `details` is null, as for {}
    for (pred, gold), sc in zip(cases, batch):
        want = ref_exact_match(pred, gold, settings)
        if want is None:
            assert sc == Score.unscored()
            continue
        ok, npred, ngold = want
        assert (sc.correct, sc.value, sc.status, sc.reason, sc.normalized_prediction, sc.normalized_target,
                sc.details) == (ok, float(ok), "scored", "equal" if ok else "different", npred, ngold, {}), (pred, gold)


def test_normalize_text_and_parse_number_are_the_per_row_rules():
    texts = [t for pair in pairs(4000, seed=3) for t in pair if t is not None] + WHITESPACE + FRAGMENTS
    for t in texts:
        assert normalize_text(t) == ref_normalize(t), repr(t)
        assert normalize_text(t, case=True) == ref_normalize(t, case=True), repr(t)
        assert repr(parse_number(t)) == repr(ref_parse_number(t)), repr(t)  # -0.0 stays -0.0
        assert repr(read_quantity(t) and tuple(read_quantity(t))) == repr(ref_quantity(t)), repr(t)
    for v in [None, True, 3, 2.5, float("nan"), float("inf")]:
        assert repr(parse_number(v)) == repr(ref_parse_number(v))


# ---- judge ----------------------------------------------------------------------------------------------------------
seen: dict[str, list[JudgeInput]] = {}


@register_metric("batch_test_reads_all", replace=True)
class ReadsAll(Metric):
    name = "batch_test_reads_all"
    requires_target = False

    def score(self, item):
        seen.setdefault(self.name, []).append(item)
        return Score(value=0.5, details={"n_calls": len(item.tool_calls)}, normalized_prediction=item.stop_reason)


@register_metric("batch_test_reads_target", replace=True)
class ReadsTarget(ReadsAll):
    name = "batch_test_reads_target"
    requires_target = True
    inputs = frozenset({"target", "prediction"})


def file_split():
    return SplitConfig(key="b/t", benchmark="b", split="t", adapter="file", options={"path": "unused.jsonl"},
                       metrics=["exact_match"], prompt_template=None, base_dir=Path("."))


def frames():
    prompts = pd.DataFrame({
        "sample_id": ["a", "b", "c", "d"], "model": "m", "prompt_text": ["qa", "qb", "qc", "qd"],
        "target": ["1", None, "x", "y"], "metadata": ['{"k": 1}', None, "{}", '{"k": 2}'],
        "slices": ['{"cat": "u"}', None, '{"cat": "v"}', '{"cat": "u"}'],
        "tools": ['[{"name": "t"}]', None, None, None]})
    rollouts = pd.DataFrame({  # another order than the prompts: judge pairs them by sample id
        "sample_id": ["d", "c", "b", "a"], "status": ["ok", "error", "ok", "ok"],
        "error": [None, "boom", None, None], "prediction": ["Y", None, "z", "1.0"], "raw_output": ["Y", None, "z", "1.0"],
        "trajectory": [None, None, None, '[{"role": "assistant"}]'], "tool_trace": [None, None, None, '[{"name": "t"}]'],
        "stop_reason": [None, None, None, "final"]})
    return prompts, rollouts


def test_judge_rows_are_sample_major_with_each_metrics_verdicts():
    seen.clear()
    prompts, rollouts = frames()
    split = file_split()
    df = pipeline.judge(split, prompts, rollouts, metrics=["exact_match", "batch_test_reads_all"])
    assert list(df.columns) == ["benchmark_split", "model", "sample_id", "metric", "score", "correct", "status",
                                "reason", "prediction", "normalized_prediction", "target", "normalized_target",
                                "slices", "details", "judge_fingerprint"]
    assert list(df["sample_id"]) == ["a", "a", "b", "b", "c", "c", "d", "d"]
    assert list(df["metric"]) == ["exact_match", "batch_test_reads_all"] * 4
    assert list(df["status"]) == ["scored", "scored", "unscored", "scored", "error", "error", "scored", "scored"]
    assert df["reason"].iloc[4] == "rollout failed: boom" and df["score"].iloc[4] == 0.0
    assert df["correct"].tolist()[:4] == [True, None, None, None] and df["score"].isna().tolist()[2]
    assert df["details"].tolist()[1] == '{"n_calls": 1}' and df["details"].iloc[0] is None
    assert df["normalized_prediction"].tolist()[1] == "final"
    assert (df["score"].dtype, df["correct"].dtype) == ("float64", object)
    assert df["slices"].tolist()[2] is None and df["target"].tolist()[2] is None
    assert len(set(df["judge_fingerprint"])) == 2


def test_judge_decodes_only_the_json_a_metric_reads():
    seen.clear()
    prompts, rollouts = frames()
    split = file_split()
    pipeline.judge(split, prompts, rollouts, metrics=["batch_test_reads_all", "batch_test_reads_target"])
    full = {i.sample_id: i for i in seen["batch_test_reads_all"]}
    assert set(full) == {"a", "b", "d"}  # rollout c failed
    assert full["a"].metadata == {"k": 1} and full["a"].tools == [{"name": "t"}]
    assert full["a"].tool_calls == [{"name": "t"}] and full["a"].trajectory == [{"role": "assistant"}]
    assert full["a"].stop_reason == "final" and full["b"].metadata == {} and full["d"].tools is None
    lean = {i.sample_id: i for i in seen["batch_test_reads_target"]}
    assert set(lean) == {"a", "d"}  # b has no target
    assert (lean["a"].target, lean["a"].prediction, lean["a"].input, lean["a"].raw_output) == ("1", "1.0", "qa", "1.0")
    assert (lean["a"].metadata, lean["a"].tool_calls, lean["a"].trajectory, lean["a"].tools,
            lean["a"].stop_reason) == ({}, [], [], None, None)


def test_judge_of_no_samples_or_no_metrics_is_an_empty_frame():
    prompts, rollouts = frames()
    split = file_split()
    assert pipeline.judge(split, prompts.iloc[:0], rollouts.iloc[:0], metrics=["exact_match"]).shape == (0, 0)
    assert pipeline.judge(split, prompts, rollouts, metrics=[]).shape == (0, 0)


def test_judge_refuses_a_sample_id_twice():
    prompts, rollouts = frames()
    with pytest.raises(DataError, match="occurs more than once in the rollouts"):
        pipeline.judge(file_split(), prompts, pd.concat([rollouts, rollouts.iloc[:1]]), metrics=["exact_match"])
    with pytest.raises(DataError, match="occurs more than once in the prompts"):
        pipeline.judge(file_split(), pd.concat([prompts, prompts.iloc[:1]]), rollouts, metrics=["exact_match"])
