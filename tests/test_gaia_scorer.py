"""The GAIA scorer against a table of edge cases, each one checked by hand against the official rules:
the branch is picked by the ground truth (number / list on , or ; / string)."""
import math

import pytest

from evalpipe.benchmarks.gaia_scorer import (GaiaMetric, is_unscored, normalize_number_str, normalize_str,
                                             question_scorer, score_answer, split_string)
from evalpipe.metrics import JudgeInput, build_metric

NUMBER = [
    ("42", "42", True),
    ("42.0", "42", True),
    ("42", "42.0", True),
    (" 42 ", "42", True),            # float() ignores surrounding whitespace
    ("42\n", "42", True),
    ("$42", "42", True),             # $ % and , are removed from the prediction
    ("42%", "42", True),
    ("1,000", "1000", True),
    ("$1,234.50", "1234.5", True),
    ("1e3", "1000", True),
    ("0.1", "1e-1", True),
    ("-3", "-3", True),
    ("3", "-3", False),
    ("4.2", "42", False),
    ("1.000", "1000", False),        # a European thousands dot is a decimal point to float()
    ("1 000", "1000", False),        # a space inside the number does not parse -> inf
    ("17 km", "17", False),          # other units are not removed
    ("17km", "17", False),
    ("€17", "17", False),
    ("seventeen", "17", False),
    ("", "17", False),
    ("FINAL ANSWER: 42", "42", False),  # the scorer does not extract; the adapter does
    ("1_000", "1000", True),         # float() accepts underscores
    ("٤٢", "42", True),              # ... and Unicode decimal digits
    ("42", " 42 ", True),            # a ground truth with spaces is still a number
    ("anything", "inf", True),       # a prediction that fails to parse is inf: the original's quirk
    ("nan", "nan", False),           # nan never equals itself
]

LIST = [
    ("a, b, c", "a, b, c", True),
    ("a,b,c", "a; b; c", True),      # both separators split both sides
    ("a; b", "a;b", True),
    ("A , B", "a,b", True),          # whitespace removed and lowercased per element
    ("a, b", "a, b, c", False),      # length mismatch
    ("a, b, c, d", "a, b, c", False),
    ("b, a", "a, b", False),         # order matters
    ("a., b", "a, b", False),        # punctuation is KEPT inside list elements
    ("Blue-Heron, Calypso", "Blue Heron, Calypso", False),
    ("blue heron, CALYPSO", "Blue Heron, Calypso", True),
    ("1, 2, 3", "1,2,3", True),      # numeric elements compare as numbers
    ("1.0, 2", "1, 2", True),
    ("$1, 2%, 3", "1, 2, 3", True),
    ("one, 2", "1, 2", False),
    ("1 km, 2", "1, 2", False),
    ("1000", "1,000", False),        # "1,000" as ground truth is a two-element list...
    ("1,000", "1,000", True),
    ("1, 000", "1,000", True),       # ... whose elements are 1 and 0
    ("a,,b", "a,,b", True),          # empty elements are kept
    ("a, b", "a,,b", False),
    ("", "a, b", False),
    ("Ünïcode, ß", "ünïcode, ß", True),
    ("x, 3", "x, 3.0", True),
]

STRING = [
    ("Paris", "paris", True),
    ("Paris.", "Paris", True),       # ASCII punctuation removed
    ("sea-gull!", "Seagull", True),
    ("Sea gull", "seagull", True),   # all whitespace removed
    ("Paris\u00a0France", "paris france", True),  # Unicode whitespace counts as whitespace
    ("the Paris", "Paris", False),   # articles are not removed
    ("St. Petersburg", "Saint Petersburg", False),
    ("Café", "café", True),
    ("café", "cafe", False),         # accents are not folded
    ("¿Qué?", "qué", False),         # only ASCII punctuation is removed
    ("Straße", "STRASSE", False),    # lower(), not casefold()
    ("", "", True),
    ("x", "", False),
    ("", "Paris", False),
    ("   ", "Paris", False),
    ("right", "Right.", True),
]

NOT_A_STRING = [
    (None, "Paris"), (None, "42"), (None, "a, b"), (42, "42"), (["Paris"], "Paris"), (3.0, "3"), (None, ""),
]


@pytest.mark.parametrize("pred,truth,expected", NUMBER)
def test_number_branch(pred, truth, expected):
    assert question_scorer(pred, truth) is expected
    assert score_answer(pred, truth).reason.startswith("number")


@pytest.mark.parametrize("pred,truth,expected", LIST)
def test_list_branch(pred, truth, expected):
    assert question_scorer(pred, truth) is expected
    assert score_answer(pred, truth).reason.startswith("list")


@pytest.mark.parametrize("pred,truth,expected", STRING)
def test_string_branch(pred, truth, expected):
    assert question_scorer(pred, truth) is expected
    assert score_answer(pred, truth).reason.startswith("string")


@pytest.mark.parametrize("pred,truth", NOT_A_STRING)
def test_missing_or_non_string_predictions_are_wrong_not_raised(pred, truth):
    v = score_answer(pred, truth)
    assert v.correct is False and v.score == 0.0 and v.normalized_prediction is None
    assert "no answer" in v.reason


def test_helpers():
    assert normalize_number_str("$1,000%") == 1000.0
    assert normalize_number_str("12 apples") == math.inf
    assert split_string("a,b;c,,d") == ["a", "b", "c", "", "d"]
    assert normalize_str(" Hello, World! ") == "helloworld"
    assert normalize_str(" Hello, World! ", remove_punct=False) == "hello,world!"


def test_wrapper_reports_branch_and_normalised_forms():
    v = score_answer("$1,000", "1000")
    assert (v.correct, v.score, v.normalized_prediction, v.normalized_ground_truth) == (True, 1.0, "1000.0", "1000.0")
    v = score_answer("17 km", "17")
    assert v.reason == "number: prediction is not a number" and v.normalized_prediction == "inf"
    v = score_answer("18", "17")
    assert v.reason == "number: different value"
    v = score_answer("a, B, d", "a, b, c")
    assert v.reason == "list: element(s) 3 differ" and v.normalized_prediction == "a,b,d"
    v = score_answer("a, b", "a, b, c")
    assert v.reason == "list: 2 elements, expected 3"
    v = score_answer("New  York!", "new york")
    assert v.correct and v.normalized_prediction == v.normalized_ground_truth == "newyork"


def test_metric_is_registered_and_leaves_hidden_answers_unscored():
    metric = build_metric("gaia")
    assert isinstance(metric, GaiaMetric) and metric.requires_target
    assert is_unscored("?") and is_unscored(" ? ") and is_unscored(None) and not is_unscored("0")
    s = metric.score(JudgeInput("t1", "q", "?", "42"))
    assert s.status == "unscored" and s.value is None
    s = metric.score(JudgeInput("t1", "q", None, "42"))
    assert s.status == "unscored"
    s = metric.score(JudgeInput("t1", "q", "Blue Heron, Calypso", "blue heron, calypso"))
    assert (s.status, s.value, s.correct, s.normalized_target) == ("scored", 1.0, True, "blueheron,calypso")
    s = metric.score(JudgeInput("t1", "q", "42", None))
    assert (s.status, s.value, s.correct) == ("scored", 0.0, False)
