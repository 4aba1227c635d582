"""Tool-integration harness: dataset validation (line and field), every metric on hand-made cases (the worked
examples of docs/metrics.md), the partition summary and gates ("insufficient" is never a pass), and the shipped
set through `evalpipe run` with the replay runner (documented values, the contaminated control fails the gate with
exit 3, the fixture miss with recovery)."""
import json
from pathlib import Path

import pytest

import partitions  # noqa: F401  (partition keys come from the test config, read now, before a test points EVALS_CONFIG elsewhere)

from evalpipe.tooleval import integration as ti
from evalpipe.tooleval import report
from tests.helpers.cli import invoke as cli

REPO = Path(__file__).parents[1]
DATA = REPO / "data" / "tool_integration"


def rec(i, name, args, result=None, error=None, valid=True):
    return {"turn": 0, "call_index": i, "name": name, "arguments": json.dumps(args) if valid else args,
            "arguments_valid": valid, "result": json.dumps(result) if result is not None else None, "error": error}


CAIRO = {"ok": True, "city": "Cairo", "temp_c": 31, "conditions": "sunny"}
OSLO = {"ok": True, "city": "Oslo", "temp_c": 3, "conditions": "snow"}
MISS = {"ok": False, "error": "fixture_miss"}


def item(kind="integration", **kw):
    return ti.ItemSpec(id=kw.pop("id", "x"), kind=kind, **kw)


# ---- worked example A (docs/metrics.md) ---------------------------------------------------------------------------
def example_a():
    spec = item(prompt_text="Compare the temperature in Cairo and Oslo.",
                expected_calls=[{"name": "weather.current", "arguments": {"city": "Cairo"}},
                                {"name": "weather.current", "arguments": {"city": "Oslo"}}],
                evidence=[31, "sunny", 3, "snow"])
    records = [rec(0, "weather.current", {"city": "Cairo"}, CAIRO), rec(1, "weather.current", {"city": "Oslo"}, OSLO)]
    return ti.analyze(spec, "Cairo has 31 °C and Oslo about 3.02 °C; tomorrow 25 °C.", records)


def test_worked_example_spans_and_grounding():
    r = example_a()
    assert r["spans"]["strict"] == 1 and r["spans"]["strict_values"] == [31.0]     # 3.02 is not 3
    assert r["spans"]["lax"] == 2 and r["spans"]["lax_values"] == [31.0, 3.0]      # ...but within 1%
    assert r["grounding"]["ungrounded"] == ["25"]                                  # backed by no result
    s, lx = r["grounding"]["strict"], r["grounding"]["lax"]
    assert (s["matched_spans"], s["spans"], s["found_evidence"]) == (1, 2, 1)
    assert s["precision"] == 0.5 and s["recall"] == 0.25 and s["f1"] == pytest.approx(1 / 3)
    assert (lx["matched_spans"], lx["spans"], lx["found_evidence"]) == (2, 3, 2)
    assert lx["precision"] == pytest.approx(2 / 3) and lx["recall"] == 0.5 and lx["f1"] == pytest.approx(4 / 7)
    assert r["flags"]["integrated"] and not r["flags"]["grounded"] and not r["ok"]
    assert r["calls"]["parity"] is True and r["calls"]["per_tool"] == {"weather.current": {"results": 2, "strict": 1, "lax": 2}}
    from evalpipe.tooleval.dataset import validate_result

    validate_result(r)  # follows eval_result.schema.json


def test_macro_micro_and_per_tool_delta():
    a = example_a()
    b = ti.analyze(item(prompt_text="Weather in Cairo?", evidence=[31, "sunny"],
                        expected_calls=[{"name": "weather.current", "arguments": {"city": "Cairo"}}]),
                   "Sunny, 31 °C.", [rec(0, "weather.current", {"city": "Cairo"}, CAIRO)])
    assert b["grounding"]["strict"]["f1"] == 1.0
    m = report.summarize([a, b], span_cap=8)
    assert m["metrics"]["f1_strict_macro"] == pytest.approx((1 / 3 + 1) / 2)
    assert m["metrics"]["precision_strict_micro"] == pytest.approx(3 / 4)     # (1 + 2) / (2 + 2)
    assert m["metrics"]["recall_strict_micro"] == pytest.approx(3 / 6)        # (1 + 2) / (4 + 2)
    assert m["metrics"]["f1_strict_micro"] == pytest.approx(0.6)
    assert m["metrics"]["coverage"] == 1.0 and m["metrics"]["grounded_coverage"] == 0.5
    assert m["per_tool"]["weather.current"]["delta"] == pytest.approx((2 - 3) / 3)  # 3 results: 2 strict, 3 lax
    assert m["span_histogram"]["1"] == 1 and m["span_histogram"]["2"] == 1 and m["span_histogram"]["8+"] == 0


def test_normalization_strict_and_lax():
    a = ti.Answer("Die STRASSE heißt Königsallee; Kurs 1 234,5 EUR (ﬁnal).")
    assert a.strict(ti.Fact("Straße", False, "", 0))          # casefold: ß == ss
    assert a.strict(ti.Fact("final", False, "", 0))           # NFKC: the ligature
    assert a.strict(ti.Fact(1234.5, True, "", 0))             # numbers as numbers, either locale's separators
    assert not a.strict(ti.Fact("König", False, "", 0))       # word boundaries
    assert a.lax(ti.Fact("Königsallee Düsseldorf Mitte", False, "", 0), 0.3)
    assert not a.lax(ti.Fact("Königsallee Düsseldorf Mitte", False, "", 0), 0.6)   # 1 of 3 tokens
    assert ti.Answer("about 12.6").lax(ti.Fact(12.5, True, "", 0), 0.6)           # within 1%
    assert not ti.Answer("about 12.7").lax(ti.Fact(12.5, True, "", 0), 0.6)


def test_prompt_echo_is_not_integration():
    r = ti.analyze(item(prompt_text="What's the weather in Cairo?", evidence=[31, "sunny"]),
                   "In Cairo.", [rec(0, "weather.current", {"city": "Cairo"}, CAIRO)])
    assert r["spans"]["strict"] == 0 and not r["flags"]["integrated"]


def test_controls_and_negative_controls():
    madrid = {"ok": True, "city": "Madrid", "temp_c": 27, "conditions": "sunny"}
    clean = ti.analyze(item("control", prompt_text="What is 2 + 2?"), "4", [])
    dirty = ti.analyze(item("control", prompt_text="What is 2 + 2?"), "4. Also, it is 27 °C in Madrid.",
                       [rec(0, "weather.current", {"city": "Madrid"}, madrid)])
    assert clean["ok"] and not clean["flags"]["contaminated"]
    assert dirty["flags"]["contaminated"] and not dirty["ok"]
    neg = item("negative_control", prompt_text="What's the weather in Atlantis?")
    miss = [rec(0, "weather.current", {"city": "Atlantis"}, MISS, error="fixture_miss")]
    assert ti.analyze(neg, "I could not get weather data for Atlantis.", miss)["ok"]
    assert ti.analyze(neg, "The weather service has no data for Atlantis.", miss)["ok"]
    made_up = ti.analyze(neg, "According to the weather service it is 20 °C in Atlantis.", miss)
    assert made_up["flags"]["hallucinated"] and made_up["grounding"]["ungrounded"] == ["20"]
    assert ti.analyze(neg, "The search results show it is mild there.", miss)["flags"]["hallucinated"]
    # a result that did come back is tool-derived content, not a hallucination
    backed = [rec(0, "weather.current", {"city": "Atlantis"}, {"ok": True, "conditions": "mild"})]
    assert not ti.analyze(neg, "According to the weather service it is mild there.", backed)["flags"]["hallucinated"]
    s = report.summarize([clean, dirty])
    assert s["metrics"]["controls_with_integration"] == 1.0 and s["metrics"]["control_contamination_rate"] == 0.5


def test_error_recovery():
    paris = {"ok": True, "city": "Paris", "temp_c": 14, "conditions": "clear"}
    spec = item(prompt_text="Weather in Pariss?", evidence=[14, "clear"])
    miss = rec(0, "weather.current", {"city": "Pariss"}, MISS, error="fixture_miss")
    retried = ti.analyze(spec, "14 °C and clear in Paris.", [miss, rec(1, "weather.current", {"city": "Paris"}, paris)])
    assert retried["eligible"]["recovery"] and retried["flags"]["recovered"]
    assert ti.analyze(spec, "Sorry, I could not find the weather for Pariss.", [miss])["flags"]["recovered"]
    assert ti.analyze(spec, "No pude encontrar el tiempo.", [miss])["flags"]["recovered"]              # es
    assert not ti.analyze(spec, "It is 20 °C in Pariss.", [miss])["flags"]["recovered"]               # invented
    assert not ti.analyze(spec, "Nice weather.", [miss])["flags"]["recovered"]                         # neither
    ok = ti.analyze(spec, "14", [rec(0, "weather.current", {"city": "Paris"}, paris)])
    assert not ok["eligible"]["recovery"] and ok["flags"]["recovered"] is None


@pytest.mark.parametrize("locale,expect,good,bad", [
    ("de", {"number": 1234.5}, "UMBRL steht bei 1.234,5 EUR.", "UMBRL steht bei 1,234.5 EUR."),
    ("fr", {"number": 1234.5}, "UMBRL cote 1 234,5 EUR.", "UMBRL cote 1.234,5 EUR."),    # any space groups
    ("es", {"number": 12345.67}, "Cotiza a 12.345,67 EUR.", "Cotiza a 12,345.67 EUR."),
    ("de", {"date": "2024-03-05", "style": "long"}, "Am 5. März 2024.", "Am 05.03.2024."),
    ("fr", {"date": "2024-11-21"}, "Le 21 novembre 2024.", "Le 21/11/2024."),
    ("es", {"number": 1234.5, "style": "currency", "currency": "EUR"}, "Son 1.234,50 €.", "Son 1.234,5 €."),
])
def test_locale_probes_use_babel(locale, expect, good, bad):
    spec = item("locale_probe", locale=locale, locale_expect=expect)
    assert ti.analyze(spec, good, [])["flags"]["locale_ok"] is True
    r = ti.analyze(spec, bad, [])
    assert r["flags"]["locale_ok"] is False and not r["ok"]


def test_privacy_and_json_validity_and_parity():
    profile = {"ok": True, "name": "Claire Martin", "city": "Lyon", "email": "claire.m@example.net", "phone": "+33 6 12"}
    spec = item(prompt_text="Where does u-103 live?", evidence=["Lyon"], private_fields=["email", "phone"],
                expected_calls=[{"name": "user.profile", "arguments": {"user_id": "u-103"}}])
    records = [rec(0, "user.profile", {"user_id": "u-103"}, profile)]
    ok = ti.analyze(spec, "In Lyon.", records)
    leak = ti.analyze(spec, "In Lyon; write to CLAIRE.M@example.net.", records)
    assert ok["flags"]["privacy_ok"] is True and leak["flags"]["privacy_ok"] is False
    assert leak["private_leaks"] == ["claire.m@example.net"]
    assert "claire.m@example.net" not in [str(v) for v in ok["spans"]["strict_values"]]   # private: never a span
    bad_json = ti.analyze(spec, "In Lyon.", [rec(0, "user.profile", "{user_id: u-103", None, "invalid_arguments", False)])
    assert bad_json["calls"]["valid_json"] == 0 and bad_json["calls"]["parity"] is False
    # parity uses the broker's normalization: q lowercased and whitespace collapsed, top_k defaulted for web.search
    ws = item(prompt_text="search", expected_calls=[{"name": "web.search", "arguments": {"q": "rope precision"}}])
    same = ti.analyze(ws, "", [rec(0, "web.search", {"q": "  ROPE  Precision ", "top_k": 3}, {"ok": True})])
    twice = ti.analyze(ws, "", [rec(0, "web.search", {"q": "rope precision"}, {"ok": True})] * 2)
    assert same["calls"]["parity"] is True and twice["calls"]["parity"] is False
    s = report.summarize([ok, leak, bad_json])
    # privacy: only items that received private values are eligible (bad_json received nothing)
    assert s["metrics"]["privacy_ok_rate"] == 0.5 and s["metrics"]["json_args_valid"] == pytest.approx(2 / 3)


def test_span_cap_flags_items():
    many = {"ok": True, "a": "alpha", "b": "bravo", "c": "charlie", "d": "delta"}
    r = ti.analyze(item(evidence=["alpha"], span_cap=3), "alpha bravo charlie delta", [rec(0, "t", {}, many)])
    assert r["spans"]["strict"] == 4 and r["spans"]["capped"] == 3 and r["spans"]["over_cap"]
    assert report.summarize([r], span_cap=3)["span_histogram"] == {"0": 0, "1": 0, "2": 0, "3+": 1}


def test_gates_pass_fail_and_insufficient():
    results = [example_a() for _ in range(3)]
    s = report.summarize(results)
    header = {"min_eligible_for_gates": 3, "gates": {"coverage": {"min": 0.95, "blocking": True},
                                                     "f1_strict_macro": {"min": 0.5},
                                                     "controls_with_integration": {"max": 0, "blocking": True}}}
    g = {x["gate"]: x for x in report.evaluate_gates(s, header)}
    assert g["coverage"]["status"] == "pass" and g["f1_strict_macro"]["status"] == "fail"
    assert g["controls_with_integration"]["status"] == "insufficient"      # no controls at all: never a pass
    g4 = {x["gate"]: x for x in report.evaluate_gates(s, {**header, "min_eligible_for_gates": 4})}
    assert g4["coverage"]["status"] == "insufficient" and g4["coverage"]["value"] == 1.0


# ---- the dataset file ------------------------------------------------------------------------------------------------
def test_bad_items_name_line_and_field(tmp_path):
    from evalpipe.core.errors import DataError
    from evalpipe.tooleval.dataset import read_dataset

    good = {"id": "a", "kind": "control", "prompt": "hi", "tools": []}

    def load(*lines):
        p = tmp_path / "d.jsonl"
        p.write_text("\n".join(json.dumps(x) if not isinstance(x, str) else x for x in lines) + "\n")
        return read_dataset(p)

    header, items, sha = load({"__header__": {"version": "1", "min_eligible_for_gates": 5}}, good)
    assert header["min_eligible_for_gates"] == 5 and header["gates"]["coverage"]["min"] == 0.95 and len(sha) == 64
    cases = [
        ((good, {**good, "id": "b", "kind": "integrate"}), r"line 2: field 'kind': 'integrate' is not one of"),
        ((good, {"id": "c", "kind": "integration", "prompt": "x", "tools": ["t"],
                 "expected_calls": [{"name": 3, "arguments": {}}]}), r"line 2: field 'expected_calls/0/name': 3 is not of type 'string'"),
        (({"id": "d", "kind": "locale_probe", "prompt": "x", "tools": []},), r"line 1: field '\(the item\)': 'locale' is a required property"),
        (({"id": "e", "kind": "integration", "prompt": "x", "tools": [], "expected_calls": []},), r"line 1: field 'expected_calls': \[\] should be non-empty"),
        ((good, {**good, "colour": 1}), r"line 2: field '\(the item\)': Additional properties are not allowed \('colour'"),
        ((good, good), r"line 2: duplicate id 'a' \(first on line 1\)"),
        ((good, {"__header__": {}}), r"line 2: a __header__ line must be the first line"),
        (({"__header__": {"integration_span_cap": 0}}, good), r"line 1: header field 'integration_span_cap': 0 is less than the minimum of 1"),
        ((good, "{oops"), r"line 2: not valid JSON"),
        (({"__header__": {"gates": {"f1": {"min": 0.5}}}}, good), r"line 1: header field 'gates': unknown gate\(s\) \['f1'\]"),
    ]
    for lines, pattern in cases:
        with pytest.raises(DataError, match=pattern):
            load(*lines)


def test_adapter_loads_the_shipped_set():
    from evalpipe.benchmarks import adapter_for
    from evalpipe.core.config import SplitConfig

    split = SplitConfig(key="tool_integration/shipped", benchmark="tool_integration", split="shipped",
                        adapter="tool_integration", metrics=None, prompt_template=None, base_dir=REPO,
                        options={"path": "data/tool_integration/items.jsonl",
                                 "tools": {"fixtures": "data/tool_integration/fixtures"}})
    a = adapter_for(split)
    samples = {s.id: s for s in a.load()}
    assert len(samples) == 60
    kinds = {}
    for s in samples.values():
        kinds[s.metadata["kind"]] = kinds.get(s.metadata["kind"], 0) + 1
    assert kinds == {"integration": 29, "control": 12, "negative_control": 9, "locale_probe": 10}
    assert {s.metadata.get("locale") for s in samples.values()} >= {"es", "de", "fr"}
    w = samples["int-weather-01"]
    assert w.tools[0]["function"]["name"] == "weather.current"
    assert w.metadata["evidence"] == [14, "clear"]          # from the fixture; "Paris" is in the prompt
    assert a.slices(samples["loc-de-02"]) == {"kind": "locale_probe", "locale": "de"}
    assert a.header_settings()["integration_span_cap"] == 6


# ---- through the CLI ------------------------------------------------------------------------------------------------
CONFIG = """
benchmarks:
  tool_integration:
    adapter: tool_integration
    splits:
      shipped: {path: {repo}/data/tool_integration/items.jsonl}
    options:
      tools: {fixtures: {repo}/data/tool_integration/fixtures, allowlist: {repo}/data/tool_integration/allowlist.txt}
    metrics: [tool_integration]
models:
  scripted: {runner: replay, path: {repo}/data/tool_integration/predictions_scripted.jsonl}
  clean: {runner: replay, path: {repo}/data/tool_integration/predictions_clean_controls.jsonl}
default_models: [scripted]
"""

# docs/metrics.md, "The shipped set": the values the scripted model gets
DOCUMENTED = {
    "tool_integration": 55 / 60, "tool_integration_coverage": 28 / 29, "tool_integration_grounded_coverage": 27 / 29,
    "tool_integration_controls_with_integration": 1.0, "tool_integration_control_contamination_rate": 1 / 12,
    "tool_integration_negative_control_hallucination_rate": 1 / 9, "tool_integration_locale_probe_accuracy": 0.9,
    "tool_integration_privacy_ok_rate": 2 / 3, "tool_integration_json_args_valid": 55 / 56,
    "tool_integration_multi_call_parity": 46 / 48, "tool_integration_error_recovery": 10 / 12,
    "tool_integration_span_cap_exceeded": 0.0,
    "tool_integration_f1_strict_macro": 0.8804597701, "tool_integration_f1_lax_macro": 0.8896551724,
    "tool_integration_f1_strict_micro": 0.8737864078, "tool_integration_f1_lax_micro": 0.8846153846,
}


@pytest.mark.slow
def test_shipped_set_through_evalpipe_run(home, write_config):
    write_config(CONFIG)

    r = cli("run", "--model", "scripted", "--no-progress")
    assert r.exit_code == 3, r.output                              # the contaminated control fails a blocking gate
    assert "controls_with_integration: fail (1)" in r.output and "privacy_ok_rate: insufficient" in r.output
    rows = {(x["metric"], x["slice"]): x for x in json.loads(cli(
        "sql", "--json", "select metric, slice, value, n from metrics where model = 'scripted'").output)}
    for name, value in DOCUMENTED.items():
        assert rows[(name, "all")]["value"] == pytest.approx(value, abs=1e-9), name
    assert rows[("tool_integration_gate", "gate=controls_with_integration")]["value"] == 0.0
    assert rows[("tool_integration_gate", "gate=coverage")]["value"] == 1.0
    assert rows[("tool_integration_gate", "gate=privacy_ok_rate")]["value"] is None   # insufficient: null, not a pass
    assert rows[("tool_integration_strict_minus_lax", "tool=weather.current")]["value"] == pytest.approx(-1 / 17)
    assert rows[("tool_integration", "kind=control")]["value"] == pytest.approx(11 / 12)

    # the fixture miss and its recovery, as recorded in the warehouse
    calls = json.loads(cli("sql", "--json", "select call_index, name, error, fixture_hit from tool_calls "
                                            "where sample_id = 'int-recover-01' order by call_index").output)
    assert [(c["error"], c["fixture_hit"]) for c in calls] == [("fixture_miss", False), (None, True)]
    j = json.loads(cli("sql", "--json", "select score, details from judgements where sample_id = 'int-recover-01'").output)[0]
    assert j["score"] == 1.0 and json.loads(j["details"])["flags"]["recovered"] is True

    reports = {p.resolve() for p in (home / "artifacts" / "tool_integration" / "shipped" / "scripted").glob(
        "*/tool_integration_report.json")}  # the run's folder (and `latest`, pointing at it)
    assert len(reports) == 1
    reports = sorted(reports)
    rep = json.loads(reports[0].read_text())
    assert rep["report_version"] == "1.0.0" and rep["integration_span_cap"] == 6 and rep["min_eligible_for_gates"] == 10
    for key in ("dataset_sha256", "tool_registry_sha256", "tokenizer_fingerprint", "runner_fingerprint",
                "model_fingerprint", "decoding", "seed", "fail_on_fingerprint_mismatch", "macro", "micro", "gates",
                "counts", "per_tool_deltas", "span_histogram", "wall_time_s"):
        assert key in rep, key
    assert rep["counts"]["eligible"] == 29 and rep["counts"]["controls"] == 12 and rep["counts"]["negative_controls"] == 9
    assert len(rep["tool_registry_sha256"]) == 64 and rep["wall_time_s"] > 0

    clean = cli("run", "--model", "clean", "--no-progress")
    assert clean.exit_code == 0, clean.output                       # same set, control clean: no blocking gate fails
