"""BFCL: the AST checker's rules on hand-made cases, the Python-call decoder, the adapter over BFCL's own file
layout (and its offline Hub error), the per-category rows, and the shipped sample through `evalpipe run` with
`runner: replay` (verdicts in `judgements` match BFCL's rules, data/bfcl_sample/expected.jsonl)."""
import json
from pathlib import Path

import pandas as pd
import pytest

import partitions  # noqa: F401  (partition keys come from the test config, read now, before a test points EVALS_CONFIG elsewhere)

from evalpipe.tooleval import bfcl_checker as bc

REPO = Path(__file__).parents[1]
SAMPLE = REPO / "data" / "bfcl_sample"


def doc(name, props, required):
    return {"name": name, "description": "", "parameters": {"type": "dict", "properties": props, "required": required}}


WEATHER = doc("weather.get", {"city": {"type": "string"}, "days": {"type": "integer"}, "metric": {"type": "boolean"}},
              ["city"])
ANSWER = {"weather.get": {"city": ["San Francisco, CA", "SF"], "days": [3], "metric": ["", True]}}


def check(call, answer=ANSWER, d=WEATHER):
    return bc.check_call(d, call, answer)


def test_name_required_extra_and_values():
    assert check({"weather.get": {"city": "SF", "days": 3}}).valid
    assert check({"weather_get": {"city": "SF", "days": 3}}).error_type == "simple_function_checker:wrong_func_name"
    assert check({"weather.get": {"days": 3}}).error_type == "simple_function_checker:missing_required"
    assert check({"weather.get": {"city": "SF", "days": 3, "x": 1}}).error_type == \
        "simple_function_checker:unexpected_param"
    # in the function's doc but not in the answer: unexpected too
    ans = {"weather.get": {"city": ["SF"], "days": [3]}}
    assert check({"weather.get": {"city": "SF", "days": 3, "metric": True}}, ans).error_type == \
        "simple_function_checker:unexpected_param"
    assert check({"weather.get": {"city": "SF", "days": 4}}).error_type == "value_error:others"
    assert check({"weather.get": {"city": "SF"}}).error_type == "simple_function_checker:missing_optional"
    assert check({"weather.get": {"city": "SF", "days": 3, "metric": True}}).valid  # "" or True


def test_string_standardization():
    for s in ["san francisco, ca", "San Francisco,CA", "SAN-FRANCISCO CA", "san_francisco.ca", "sf"]:
        assert check({"weather.get": {"city": s, "days": 3}}).valid, s
    assert check({"weather.get": {"city": "San Fran", "days": 3}}).error_type == "value_error:string"
    assert bc.standardize_string("It's A-b_c.d/e*f^g, h") == 'it"sabcdefgh'


def test_types_int_for_float_and_variables():
    d = doc("f", {"x": {"type": "float"}, "n": {"type": "integer"}, "b": {"type": "boolean"}}, ["x"])
    assert bc.check_call(d, {"f": {"x": 2}}, {"f": {"x": [2.0]}}).valid          # int accepted for float
    assert bc.check_call(d, {"f": {"x": 2.5}}, {"f": {"x": [2.0]}}).error_type == "value_error:others"
    assert bc.check_call(d, {"f": {"x": 1.0, "n": 2.0}}, {"f": {"x": [1.0], "n": [2]}}).error_type == \
        "type_error:simple"                                                        # no float for int
    assert bc.check_call(d, {"f": {"x": "2"}}, {"f": {"x": [2.0]}}).error_type == "type_error:simple"
    # an answer of another type than the doc's is a "variable": the value is compared as is
    assert bc.check_call(d, {"f": {"x": "rate"}}, {"f": {"x": ["rate"]}}).valid
    assert bc.check_call(d, {"f": {"x": 1.0, "b": 1}}, {"f": {"x": [1.0], "b": [True]}}).error_type == \
        "type_error:simple"


def test_lists_tuples_and_nested_items():
    d = doc("f", {"xs": {"type": "array", "items": {"type": "float"}}, "t": {"type": "tuple", "items": {"type": "integer"}},
                  "names": {"type": "array", "items": {"type": "string"}}}, [])
    a = {"f": {"xs": [[1.0, 2.0], ""], "t": [[1, 2], ""], "names": [["New York", "LA"], ""]}}
    assert bc.check_call(d, {"f": {"xs": [1.0, 2.0]}}, a).valid
    assert bc.check_call(d, {"f": {"xs": [2.0, 1.0]}}, a).error_type == "value_error:list/tuple"   # order counts
    # no int -> float inside lists...
    assert bc.check_call(d, {"f": {"xs": [1, 2]}}, {"f": {"xs": [[1.0, 2.0]]}}).error_type == "type_error:nested"
    # ...unless "" is acceptable: BFCL's item type check then passes, and [1, 2] == [1.0, 2.0] in Python
    assert bc.check_call(d, {"f": {"xs": [1, 2]}}, a).valid
    assert bc.check_call(d, {"f": {"t": (1, 2)}}, a).valid                                 # a tuple for tuple
    assert bc.check_call(d, {"f": {"names": ["new york", "l.a."]}}, a).valid               # items standardized
    assert bc.check_call(d, {"f": {"xs": []}}, a).valid                                    # "" reads as []


def test_dicts_and_lists_of_dicts():
    d = doc("book", {"room": {"type": "dict", "properties": {}}, "guests": {"type": "array", "items": {"type": "dict"}}},
            ["room"])
    a = {"book": {"room": [{"kind": ["Deluxe"], "nights": [3], "view": ["", "sea"]}],
                  "guests": [[{"name": ["Ann"], "age": [30]}, {"name": ["Bob"], "age": [31]}], ""]}}
    assert bc.check_call(d, {"book": {"room": {"kind": "deluxe", "nights": 3}}}, a).valid
    assert bc.check_call(d, {"book": {"room": {"kind": "deluxe"}}}, a).error_type == "value_error:dict_key"
    assert bc.check_call(d, {"book": {"room": {"kind": "deluxe", "nights": 3, "x": 1}}}, a).error_type == \
        "value_error:dict_key"
    assert bc.check_call(d, {"book": {"room": {"kind": "suite", "nights": 3}}}, a).error_type == "value_error:dict_value"
    ok = [{"name": "ann", "age": 30}, {"name": "Bob", "age": 31}]
    assert bc.check_call(d, {"book": {"room": {"kind": "Deluxe", "nights": 3}, "guests": ok}}, a).valid
    assert not bc.check_call(d, {"book": {"room": {"kind": "Deluxe", "nights": 3}, "guests": ok[::-1]}}, a).valid
    assert bc.check_call(d, {"book": {"room": {"kind": "Deluxe", "nights": 3}, "guests": ok[:1]}}, a).error_type == \
        "value_error:list_dict_count"


def test_categories_count_and_order():
    play = doc("play", {"artist": {"type": "string"}, "minutes": {"type": "integer"}}, ["artist", "minutes"])
    answers = [{"play": {"artist": ["Taylor Swift"], "minutes": [20]}}, {"play": {"artist": ["Maroon 5"], "minutes": [15]}}]
    ts, m5 = {"play": {"artist": "taylor swift", "minutes": 20}}, {"play": {"artist": "Maroon 5", "minutes": 15}}
    for cat in ("parallel", "parallel_multiple", "live_parallel"):
        assert bc.check_calls([play], [m5, ts], answers, cat).valid
        assert bc.check_calls([play], [ts], answers, cat).error_type.endswith(":wrong_count")
        assert bc.check_calls([play], [ts, ts], answers, cat).error_type.endswith(":cannot_find_match")
    other = doc("stop", {}, [])
    assert bc.check_calls([other, play], [ts], answers[:1], "multiple").valid
    assert bc.check_calls([other, play], [ts, m5], answers[:1], "multiple").error_type == \
        "multiple_function_checker:wrong_count"
    assert bc.check_calls([play], [ts, ts], answers[:1], "simple_python").error_type == \
        "simple_function_checker:wrong_count"
    assert bc.check_calls([play], [], answers[:1], "live_simple").error_type == "simple_function_checker:wrong_count"


def test_relevance_categories():
    assert bc.score_output("irrelevance", [], None, None, "not a call list").valid
    assert bc.score_output("irrelevance", [], None, [], None).valid
    assert bc.score_output("live_irrelevance", [], None, [{}], None).valid
    assert not bc.score_output("irrelevance", [], None, [{"f": {}}], None).valid
    assert bc.score_output("live_relevance", [], None, [{"f": {"a": 1}}], None).valid
    assert not bc.score_output("live_relevance", [], None, [], None).valid
    assert bc.score_output("simple_python", [], [], None, "bad").error_type == "ast_decoder:decoder_failed"


def test_python_call_decoder():
    assert bc.decode_python_calls("[math.factorial(number=5), f(a=[1, 2], b={'k': 'v'}, c=(1, 2))]") == [
        {"math.factorial": {"number": 5}}, {"f": {"a": [1, 2], "b": {"k": "v"}, "c": (1, 2)}}]
    assert bc.decode_python_calls("```\nf(a=-1.5, b=2**3, c=None, d=True)\n```") == [
        {"f": {"a": -1.5, "b": 8, "c": None, "d": True}}]
    assert bc.decode_python_calls("f(1, a=x)") == [{"f": {"a": "x"}}]  # positional ignored, a name is its text
    assert bc.decode_python_calls("[]") == []
    for bad in ["I cannot help with that.", "[f(a=lambda: 1)]", "[f(a=x + 1)]", "[1, f(a=1)]", "[f(a=math.pi)]"]:
        with pytest.raises(bc.DecodeError):
            bc.decode_python_calls(bad)
    assert bc.decode_tool_calls([{"name": "f", "arguments": '{"a": 1}'}]) == [{"f": {"a": 1}}]
    with pytest.raises(bc.DecodeError):
        bc.decode_tool_calls([{"name": "f", "arguments": "{a: 1"}])
    assert bc.category_of("live_multiple_3-2-1") == "live_multiple" and bc.category_of("simple_python_12") == "simple_python"


# ---- the metric on JudgeInput ------------------------------------------------------------------------------------
def _item(sid, category, calls=None, text=None, target=None, docs=None, trajectory=None):
    from evalpipe.metrics import JudgeInput

    return JudgeInput(sample_id=sid, input="", target=target, prediction=text, raw_output=text,
                      metadata={"category": category, "functions": docs or [WEATHER]},
                      tool_calls=calls or [], trajectory=trajectory or [])


def test_metric_reads_tool_call_records_and_text():
    from evalpipe.metrics import build_metric

    m = build_metric("bfcl_ast")
    target = json.dumps([ANSWER])
    rec = [{"turn": 0, "call_index": 0, "name": "weather.get", "arguments": '{"city": "SF", "days": 3}'},
           {"turn": 1, "call_index": 1, "name": "weather.get", "arguments": '{"city": "SF", "days": 9}'}]
    s = m.score(_item("simple_python_0", "simple_python", calls=rec, target=target))
    assert s.value == 1.0 and s.details["source"] == "tool_calls"   # only the first turn's calls count
    s = m.score(_item("simple_python_0", "simple_python", text="[weather.get(city='SF', days=4)]", target=target))
    assert s.value == 0.0 and s.reason.startswith("value_error:others")
    s = m.score(_item("simple_python_0", "simple_python", text="Sure! It is sunny.", target=target))
    assert s.value == 0.0 and s.reason.startswith("ast_decoder:decoder_failed")
    bad_json = [{"turn": 0, "name": "weather.get", "arguments": "{city"}]
    assert m.score(_item("simple_python_0", "simple_python", calls=bad_json, target=target)).value == 0.0
    assert m.score(_item("irrelevance_3", "irrelevance", calls=bad_json)).value == 1.0  # as BFCL: no decodable call
    assert m.score(_item("irrelevance_3", "irrelevance", text="The weather tool can't answer that.")).value == 1.0
    assert m.score(_item("simple_python_1", "simple_python")).status == "unscored"


def test_category_mean_row_is_unweighted():
    from evalpipe.metrics import aggregate

    rows = []
    for i, (cat, score) in enumerate([("simple_python", 1), ("simple_python", 1), ("simple_python", 1),
                                       ("simple_python", 0), ("irrelevance", 0), ("irrelevance", 1)]):
        rows.append({"sample_id": f"{cat}_{i}", "metric": "bfcl_ast", "score": float(score), "status": "scored",
                     "slices": json.dumps({"category": cat}), "details": json.dumps({"category": cat})})
    out = aggregate(pd.DataFrame(rows)).set_index(["metric", "slice"])
    assert out.loc[("bfcl_ast", "all"), "value"] == pytest.approx(4 / 6)
    assert out.loc[("bfcl_ast", "category=simple_python"), "value"] == 0.75
    assert out.loc[("bfcl_ast", "category=irrelevance"), "value"] == 0.5
    mean = out.loc[("bfcl_ast_category_mean", "all")]
    assert mean["value"] == pytest.approx(0.625) and mean["n"] == 6 and mean["ci_low"] <= 0.625 <= mean["ci_high"]


# ---- the adapter -------------------------------------------------------------------------------------------------
def _split(tmp_path, **options):
    from evalpipe.core.config import SplitConfig

    return SplitConfig(key="bfcl/x", benchmark="bfcl", split="x", adapter="bfcl", options=options, metrics=None,
                       prompt_template=None, base_dir=REPO)


def test_adapter_reads_bfcl_layout(tmp_path):
    from evalpipe.benchmarks import adapter_for

    a = adapter_for(_split(tmp_path, path="data/bfcl_sample"))
    samples = a.load()
    cats = {a.slices(s)["category"] for s in samples}
    assert cats == {"simple_python", "multiple", "parallel", "parallel_multiple", "irrelevance", "live_simple",
                    "live_irrelevance"}
    by_id = {s.id: s for s in samples}
    s0 = by_id["simple_python_3"]
    params = s0.tools[0]["function"]["parameters"]
    assert s0.tools[0]["function"]["name"] == "physics.velocity" and params["type"] == "object"
    assert params["properties"]["distance"] == {"type": "number", "description": "Distance in meters.", "format": "float"}
    hotel = by_id["simple_python_8"].tools[0]["function"]["parameters"]["properties"]["room"]
    assert hotel["type"] == "object" and hotel["properties"]["nights"]["type"] == "integer"
    assert by_id["irrelevance_0"].target is None and json.loads(by_id["multiple_0"].target)[0]["geometry.circle_area"]
    assert a.build_messages(s0) == [{"role": "user", "content": s0.input}]
    assert by_id["live_simple_0-0-0"].metadata["category"] == "live_simple"

    one = adapter_for(_split(tmp_path, path="data/bfcl_sample/BFCL_v4_parallel.json")).load()
    assert [s.id for s in one] == ["parallel_0", "parallel_1", "parallel_2"]
    some = adapter_for(_split(tmp_path, path="data/bfcl_sample", categories=["multiple", "irrelevance"])).load()
    assert {s.metadata["category"] for s in some} == {"multiple", "irrelevance"}
    prompting = adapter_for(_split(tmp_path, path="data/bfcl_sample/BFCL_v4_parallel.json", prompt_style="prompting"))
    p0 = prompting.load()[0]
    assert p0.tools is None and "[func_name1(" in prompting.build_messages(p0)[0]["content"]


def test_adapter_errors_are_one_line(tmp_path, monkeypatch):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.core.errors import DataError

    q = tmp_path / "BFCL_v4_simple_python.json"
    q.write_text((SAMPLE / "BFCL_v4_simple_python.json").read_text())
    with pytest.raises(DataError, match=r"no possible answer for 'simple_python_0'.*set 'answers:'"):
        adapter_for(_split(tmp_path, path=str(q))).load()
    mt = tmp_path / "BFCL_v4_multi_turn_base.json"
    mt.write_text(json.dumps({"id": "multi_turn_base_0", "question": [[{"role": "user", "content": "hi"}]],
                              "function": []}) + "\n")
    with pytest.raises(DataError, match="category 'multi_turn_base' is not scored by bfcl_ast"):
        adapter_for(_split(tmp_path, path=str(mt))).load()
    bad = tmp_path / "BFCL_v4_irrelevance.json"
    bad.write_text('{"id": "irrelevance_0", "question": [[]], "function": []}\n{oops\n')
    with pytest.raises(DataError, match=r"line 2: not valid JSON"):
        adapter_for(_split(tmp_path, path=str(bad))).load()
    # no path: the Hub dataset, which offline and uncached fails at once with what to do
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(DataError) as e:
        adapter_for(_split(tmp_path, file="BFCL_v3_simple.json", cache_dir=str(tmp_path / "hf"))).load()
    msg = str(e.value)
    assert "\n" not in msg and "gorilla-llm/Berkeley-Function-Calling-Leaderboard" in msg and "HF_HUB_OFFLINE" in msg
    assert "set 'path:'" in msg


# ---- through the CLI ---------------------------------------------------------------------------------------------
CONFIG = """
benchmarks:
  bfcl:
    adapter: bfcl
    splits:
      sample: {path: {repo}/data/bfcl_sample, max_turns: 1}   # BFCL scores the first reply only
    metrics: [bfcl_ast]
models:
  bfcl-scripted: {runner: replay, path: {repo}/data/bfcl_sample/predictions.jsonl}
default_models: [bfcl-scripted]
"""


@pytest.mark.slow
def test_sample_through_evalpipe_run_with_replay(home, write_config, monkeypatch):
    from click.testing import CliRunner

    write_config(CONFIG)
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--benchmark", "bfcl", "--split", "sample", "--model", "bfcl-scripted",
                                  "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    q = CliRunner().invoke(main, ["sql", "--json", "select sample_id, score, reason from judgements "
                                  "where metric = 'bfcl_ast' order by sample_id"], catch_exceptions=False)
    got = {row["sample_id"]: row for row in json.loads(q.output)}
    expected = [json.loads(line) for line in (SAMPLE / "expected.jsonl").read_text().splitlines()]
    assert len(got) == len(expected) == 22
    for e in expected:
        row = got[e["sample_id"]]
        assert row["score"] == (1.0 if e["valid"] else 0.0), (e, row)
        if not e["valid"]:
            assert row["reason"].startswith(e["rule"]), (e, row)
    m = CliRunner().invoke(main, ["sql", "--json", "select metric, slice, value, n from metrics "
                                  "where metric like 'bfcl_ast%' order by metric, slice"], catch_exceptions=False)
    rows = {(x["metric"], x["slice"]): x for x in json.loads(m.output)}
    assert rows[("bfcl_ast", "all")]["value"] == pytest.approx(11 / 22) and rows[("bfcl_ast", "all")]["n"] == 22
    per_cat = {"simple_python": 5 / 12, "multiple": 1 / 2, "parallel": 1 / 3, "parallel_multiple": 1.0,
               "irrelevance": 1 / 2, "live_simple": 1.0, "live_irrelevance": 1.0}
    for cat, v in per_cat.items():
        assert rows[("bfcl_ast", f"category={cat}")]["value"] == pytest.approx(v), cat
    assert rows[("bfcl_ast_category_mean", "all")]["value"] == pytest.approx(sum(per_cat.values()) / 7)
