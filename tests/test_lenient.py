"""Lenient scorers: includes, choice, regex, last_number."""
import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.metrics import build_metric, list_metrics
from evalpipe.metrics.base import JudgeInput
from evalpipe.metrics.lenient import is_lenient, last_number


def item(raw, target, prediction=None, choices=None):
    return JudgeInput(sample_id="s", input="q", target=target, prediction=prediction, raw_output=raw, choices=choices)


def test_registered_and_marked_lenient():
    assert {"includes", "choice", "regex", "last_number"} <= set(list_metrics())
    assert is_lenient("includes") and is_lenient("last_number") and not is_lenient("gaia")
    assert not is_lenient("no_such_metric")


@pytest.mark.parametrize("raw,target,ok", [
    ("The chemical symbol of gold is Au.", "Au", True),
    ("the chemical symbol of gold is AU", "Au", True),
    ("It is  Paris,\nFrance", "paris, france", True),
    ("I do not know", "Au", False),
    ("in 2023 it was", "3", False),  # a number is found as a number, never inside another (issue 20)
    ("the answer is -3", "3", False),
    ("it was 3.", "3", True),
])
def test_includes(raw, target, ok):
    s = build_metric("includes").score(item(raw, target))
    assert s.correct is ok and s.value == float(ok) and s.status == "scored"


def test_includes_whole_word_and_case_and_field():
    assert build_metric({"name": "includes", "whole_word": True}).score(item("in 2023 it was", "3")).correct is False
    assert build_metric({"name": "includes", "whole_word": True}).score(item("it was 3.", "3")).correct is True
    assert build_metric({"name": "includes", "ignore_case": False}).score(item("symbol AU", "Au")).correct is False
    # field: prediction reads the extracted answer only
    m = build_metric({"name": "includes", "field": "prediction"})
    assert m.score(item("Au is the answer. FINAL ANSWER: Ag", "Au", prediction="Ag")).correct is False


def test_includes_unscored_and_bad_settings():
    assert build_metric("includes").score(item("x", None)).status == "unscored"
    with pytest.raises(ConfigError, match="unknown setting"):
        build_metric({"name": "includes", "wholeword": True})


@pytest.mark.parametrize("raw,target,ok", [
    ("ANSWER: B", "B", True),
    ("The answer is (C).", "C", True),
    ("B) because ...", "B", True),
    ("**D**", "D", True),
    ("I think it's Paris", "A", True),  # option text, mapped to its letter
    ("I think it's Lyon", "A", False),
    ("ANSWER: B", "Paris", False),  # target given as option text: Paris is A
    ("no idea", "A", False),
])
def test_choice(raw, target, ok):
    s = build_metric("choice").score(item(raw, target, choices=["Paris", "Lyon and Nice", "Rome", "Oslo"]))
    assert s.correct is ok, s


def test_choice_prefers_the_last_stated_letter():
    assert build_metric("choice").score(item("Not (A). The answer is B", "B", choices=["x", "y"])).correct is True


def test_regex():
    m = build_metric({"name": "regex", "pattern": r"answer is (\S+?)\.?$"})
    assert m.score(item("so the answer is 42.", "42.0")).correct is True  # numbers compare as numbers
    assert m.score(item("so the answer is Au", "au")).correct is True
    assert m.score(item("nothing here", "au")).reason == "pattern not found"
    first = build_metric({"name": "regex", "pattern": r"\d+", "which": "first"})
    assert first.score(item("3 then 4", "3")).correct is True
    with pytest.raises(ConfigError, match="needs a 'pattern'"):
        build_metric("regex")
    with pytest.raises(ConfigError, match="does not compile"):
        build_metric({"name": "regex", "pattern": "("})


@pytest.mark.parametrize("text,num", [
    ("She pays $1,234.50 in total.", "1234.50"), ("-3 and then 7", "7"), ("x = -12", "-12"),
    ("45% of them", "45%"), ("so \u22123", "-3"), ("1e3 of them", "1e3"), ("none", None), ("2 apples, 3.5 pears", "3.5"),
])
def test_last_number_extraction(text, num):
    assert last_number(text) == num


def test_last_number_metric():
    m = build_metric("last_number")
    assert m.score(item("so 18 + 6 = 24", "24")).correct is True
    assert m.score(item("so 18 + 6 = 24", "$24")).correct is True
    assert m.score(item("24, no wait, 25", "24")).correct is False
    assert m.score(item("no digits", "24")).reason == "no number in the reply"
    assert m.score(item("24", "twenty")).reason == "target is not a number"
    assert build_metric({"name": "last_number", "rel_tol": 0.01}).score(item("3.14", "3.1416")).correct is True


def test_choice_reads_the_options_from_the_prompt_when_the_sample_has_none():
    prompt = "Which is the capital of France?\nA. Lyon\nB. Paris\nC. Nice\nAnswer with the letter."
    m = build_metric("choice")
    it = JudgeInput(sample_id="s", input=prompt, target="Paris", prediction=None, raw_output="ANSWER: B")
    assert m.score(it).correct is True
    it = JudgeInput(sample_id="s", input=prompt, target="B", prediction=None, raw_output="It is Paris.")
    assert m.score(it).correct is True
    assert m.options_from_prompt("no options here") is None
