"""DAEval (InfiAgent-DABench): loading the original layout, and `list_match` scoring as the official
`eval_closed_form.py` scores (references in three spellings, values kept as written, float() within 1e-6)."""
import ast
import json
import shutil
from pathlib import Path

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.metrics.list_match import is_equal, parse_answers, parse_gold

REPO = Path(__file__).parents[1]
SAMPLE = REPO / "data" / "daeval_sample"


def split(path=SAMPLE, **options):
    return SplitConfig(key="daeval/validation", benchmark="daeval", split="validation", adapter="daeval",
                       options={"path": str(path), **options}, metrics=None, prompt_template=None, base_dir=REPO)


def load(path=SAMPLE, **options):
    return list(adapter_for(split(path, **options)).load())


def reference_score(response, common_answers):
    """The official closed-form scorer, restated: extraction, comparison, accuracy by question."""
    import re

    names_values = re.findall(r"@(\w+)\[(.*?)\]", response)
    extracted = dict(names_values)
    labels = {a[0]: a[1] for a in common_answers}

    def eq(r, l):
        if r == l:
            return True
        try:
            return abs(float(r) - float(l)) < 1e-6
        except Exception:
            return False

    return float(all(eq(extracted.get(n), v) for n, v in labels.items()))


def lm(raw, gold, sid="q"):
    return build_metric("list_match").score(JudgeInput(sid, "question", gold, raw.strip(), raw_output=raw))


def answer_of(common_answers):
    return " ".join(f"@{n}[{v}]" for n, v in common_answers)


def labels():
    return [json.loads(ln) for ln in (SAMPLE / "da-dev-labels.jsonl").read_text().splitlines()]


def test_loads_the_original_layout_with_slices_and_files():
    samples = load()
    assert [s.id for s in samples] == ["0", "1", "2", "3", "4"]
    s = samples[1]
    assert json.loads(s.target) == [["top_region", "north"], ["top_units", "410"]]
    assert s.files == [str((SAMPLE / "da-dev-tables" / "sales.csv").resolve())]
    assert "Constraints: Sum units per region" in s.input and "@top_region[name]" in s.input
    assert "sales.csv" in s.input and "@answer_name[value]" in s.system and s.metadata["protocol"] == "multi_turn"
    a = adapter_for(split())
    assert a.slices(s) == {"level": "medium", "concept": ["Summary Statistics", "Feature Engineering"], "concepts": "2"}
    assert [x.id for x in load(levels=["hard", "easy"])] == ["0", "3", "4"]
    single = load(protocol="single_turn")[0]
    assert single.tools is None and "single reply" in single.system
    assert "- students.csv" not in single.input and "- sales.csv" in single.input and str(REPO) not in single.input


def test_multi_turn_turns_on_the_python_tool_and_max_turns():
    sc = split()
    adapter_for(sc)
    assert sc.options["tools"] == {"python": True} and sc.options["max_turns"] == 15
    sc = split(tools={"python": True, "bash": True}, max_turns=4)
    adapter_for(sc)
    assert sc.options["tools"] == {"python": True, "bash": True} and sc.options["max_turns"] == 4
    sc = split(protocol="single_turn")
    adapter_for(sc)
    assert "tools" not in sc.options
    # a run-time override to single_turn of options prepared for multi_turn: what was added is taken back
    prepared = split()
    adapter_for(prepared)
    again = split(**{**prepared.options, "protocol": "single_turn"})
    adapter_for(again)
    assert "tools" not in again.options and "max_turns" not in again.options
    assert list(adapter_for(again).load())[0].metadata["protocol"] == "single_turn"
    kept = split(tools={"python": True}, protocol="single_turn")  # the user's own setting stays
    adapter_for(kept)
    assert kept.options["tools"] == {"python": True}
    with pytest.raises(ConfigError, match="protocol must be one of"):
        adapter_for(split(protocol="two_turns"))


@pytest.mark.parametrize("spelling", ["json", "at", "python"])
def test_the_reference_answers_score_one_in_each_spelling(tmp_path, spelling):
    root = tmp_path / "dabench"
    shutil.copytree(SAMPLE, root)
    rows = labels()
    with (root / "da-dev-labels.jsonl").open("w") as f:
        for r in rows:
            ca = r["common_answers"]
            value = {"json": ca, "at": answer_of(ca), "python": repr([list(p) for p in ca])}[spelling]
            f.write(json.dumps({"id": r["id"], "common_answers": value}) + "\n")
    samples = load(root)
    if spelling == "python":
        assert samples[0].target == "[['mean_units', '112.92']]"
    m = build_metric("list_match")
    for s, r in zip(samples, rows):
        score = m.score(JudgeInput(s.id, s.input, s.target, None, raw_output=answer_of(r["common_answers"])))
        assert score.value == 1.0, (spelling, s.id, score.reason)
        assert score.details["components"]["proportional"] == 1.0
        assert json.loads(score.normalized_target) == dict(r["common_answers"])


def test_spaces_inside_the_brackets_score_as_the_reference_scores_them():
    gold = [["mean_fare", "34.65"], ["sex", "male"]]
    # the value keeps its spaces: float() still reads " 34.65" (right), " male" != "male" (wrong)
    for raw in ["@mean_fare[ 34.65] @sex[male]", "@mean_fare[34.65 ] @sex[ male]", "@mean_fare[34.65] @sex[male ]",
                "@mean_fare[34.650000001] @sex[male]", "@mean_fare[34.6500011] @sex[male]", "@mean_fare[3.465e1] @sex[male]",
                "@mean_fare[34.65]\n@sex[male]", "@mean_fare[34.65] @sex[Male]"]:
        ours = lm(raw, json.dumps(gold))
        assert ours.value == reference_score(raw, gold), raw
    assert lm("@mean_fare[ 34.65] @sex[male]", json.dumps(gold)).value == 1.0
    s = lm("@mean_fare[34.65] @sex[ male]", json.dumps(gold))
    assert s.value == 0.0 and s.details["sub_answers"] == {"mean_fare": True, "sex": False}
    assert parse_answers("@sex[ male ]") == {"sex": " male "}
    assert is_equal(" 1", "1.0") and not is_equal("1,000", "1000") and not is_equal(None, "1")


def test_gold_spellings_and_unreadable_references():
    expected = {"a": "1", "b": "x y"}
    for gold in ['@a[1] @b[x y]', '[["a", "1"], ["b", "x y"]]', "[['a', '1'], ['b', 'x y']]", '{"a": "1", "b": "x y"}',
                 [["a", "1"], ["b", "x y"]]]:
        assert parse_gold(gold) == expected, gold
    assert parse_gold('[["n", 3]]') == {"n": 3}  # a JSON number stays a number: "3" and "3.0" both match it
    assert lm("@n[3.0]", '[["n", 3]]').value == 1.0
    for bad in ["42", "mean is 3", "[1, 2]", "[['a']]", "{not json"]:
        with pytest.raises(DataError, match="sample 'q7'.*cannot read its reference"):
            lm("@a[1]", bad, sid="q7")
    assert lm("@a[1]", "").status == "unscored" and lm("@a[1]", "[]").status == "unscored"


def test_an_unreadable_label_fails_the_load_naming_the_line(tmp_path):
    root = tmp_path / "d"
    shutil.copytree(SAMPLE, root)
    lines = (root / "da-dev-labels.jsonl").read_text().splitlines()
    lines[2] = json.dumps({"id": 2, "common_answers": "about 4540"})
    (root / "da-dev-labels.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"da-dev-labels.jsonl line 3 \(id 2\): common_answers 'about 4540'"):
        load(root)
    (root / "da-dev-labels.jsonl").unlink()  # no labels: every sample unscored, nothing fails
    assert all(s.target is None for s in load(root))
    (root / "da-dev-tables" / "students.csv").unlink()
    with pytest.raises(DataError, match="id 3.*'students.csv' not found"):
        load(root)


def test_path_errors_and_hub_offline(monkeypatch, tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        load(tmp_path / "nope")
    with pytest.raises(DataError, match="no da-dev-questions.jsonl under"):
        load(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    sc = SplitConfig(key="daeval/validation", benchmark="daeval", split="validation", adapter="daeval", options={},
                     metrics=None, prompt_template=None, base_dir=REPO)
    with pytest.raises(DataError, match=r"infiagent/DABench is not in the local Hugging Face cache and HF_HUB_OFFLINE=1.*"
                                        r"set 'path:' under the daeval benchmark"):
        list(adapter_for(sc).load())


def test_python_literal_reference_is_what_dsgym_writes():
    text = "[['mean_fare', '34.65'], ['std', '1.2']]"
    assert ast.literal_eval(text) == [["mean_fare", "34.65"], ["std", "1.2"]]
    assert lm("@std[1.2] @mean_fare[34.65]", text).value == 1.0  # order doesn't matter


def test_matches_the_reference_on_generated_responses():
    """Many responses (spaces, case, numeric spellings, missing, repeated and unclosed answers) scored both ways."""
    import random

    rnd = random.Random(11)
    golds = [[["a", "0.5"], ["b", "yes"]], [["mean", "12.30"]], [["x", "-1"], ["y", "Blue Heron"], ["z", "3"]]]
    variants = {"0.5": ["0.5", " 0.5", "0.50", ".5", "0.5000001", "0.501", "1/2", "0,5", ""],
                "yes": ["yes", "Yes", " yes", "yes ", "no"], "12.30": ["12.3", "12.30", "1.23e1", "12.300001", "12"],
                "-1": ["-1", "-1.0", "- 1", "−1", "-1e0"], "Blue Heron": ["Blue Heron", "Blue  Heron", "blue heron", "BlueHeron"],
                "3": ["3", "3.0", "three", " 3 "]}
    checked = 0
    for _ in range(400):
        gold = rnd.choice(golds)
        parts = []
        for name, value in gold:
            if rnd.random() < 0.1:
                continue  # a missing answer
            parts.append(f"@{name}[{rnd.choice(variants[value])}]")
            if rnd.random() < 0.1:
                parts.append(f"@{name}[{rnd.choice(variants[value])}]")  # repeated: the last one counts
        if rnd.random() < 0.1:
            parts.append("@broken[open")
        rnd.shuffle(parts)
        raw = rnd.choice([" ", "\n", ", "]).join(parts)
        assert lm(raw, json.dumps(gold)).value == reference_score(raw, gold), raw
        checked += 1
    assert checked == 400


def test_skip_empty_leaves_empty_responses_out_as_the_reference():
    gold = json.dumps([["a", "1"]])
    assert lm("", gold).value == 0.0  # default: wrong
    m = build_metric({"name": "list_match", "skip_empty": True})
    assert m.score(JudgeInput("q", "", gold, "", raw_output="")).status == "unscored"
    assert m.score(JudgeInput("q", "", gold, "@a[1]", raw_output="@a[1]")).value == 1.0
    with pytest.raises(ConfigError, match="unknown setting"):
        build_metric({"name": "list_match", "tolerance": 1})
