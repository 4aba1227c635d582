"""The `gaia` metric's opt-in lenient numbers (design_refs 003): `numeric_tolerance` and `fractions`. The default
stays the official exact scorer; each case below is scored both ways."""
import pytest

import evalpipe
from evalpipe.benchmarks.gaia_scorer import score_answer
from evalpipe.core.errors import ConfigError
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.metrics.gaia_tolerance import NumberRules, parse_fraction

LENIENT = {"name": "gaia", "numeric_tolerance": 0.001, "fractions": True}

# (prediction, ground truth, official verdict, lenient verdict)
CASES = [
    ("3.1416", "3.14159", False, True),      # within 1e-3
    ("3.14", "3.14159", False, False),       # 0.00159 off: outside
    ("0.1 ", "0.1009", False, True),         # |diff| = 0.0009
    ("0.1", "0.102", False, False),          # 0.002 off
    ("1,000.0004", "1000", False, True),     # thousands comma still removed, then the tolerance
    ("$2.0005", "2", False, True),
    ("-2.0005", "2", False, False),          # a sign is not within tolerance
    ("1000.5", "1000", False, False),        # absolute, not relative: large numbers get no more room
    ("3/4", "0.75", False, True),            # a fraction prediction against a number
    ("0.75", "3/4", False, True),            # a fraction ground truth takes the number branch
    ("0.7505", "3/4", False, True),
    ("3 / 4", "3/4", True, True),            # official: string branch, "/" and spaces dropped: "34" == "34"
    ("-1/3", "-0.3333", False, True),
    ("1/0", "1/0", True, True),              # no zero denominators: both stay strings, equal as strings
    ("2/3", "0.5", False, False),
    ("seventeen", "17", False, False),       # not a number: still wrong
    ("inf", "inf", True, True),              # exact equality still holds where the difference is nan
    ("0.5, 1/4", "0.5, 0.25", False, True),  # lists: element by element
    ("0.5004, 2", "0.5, 2", False, True),
    ("0.5, 3", "0.5, 2", False, False),
    ("1 1/2", "1.5", False, False),          # mixed numbers are not read
]


@pytest.mark.parametrize("pred,gold,official,lenient", CASES)
def test_lenient_numbers_and_the_official_default(pred, gold, official, lenient):
    assert score_answer(pred, gold).correct is official
    assert score_answer(pred, gold, NumberRules(0.001, True)).correct is lenient
    metric = build_metric(LENIENT)
    assert metric.score(JudgeInput("s", "q", gold, pred)).correct is lenient
    assert build_metric("gaia").score(JudgeInput("s", "q", gold, pred)).correct is official


def test_each_setting_alone():
    assert score_answer("0.75", "3/4", NumberRules(0.001, False)).correct is False  # no fractions: a string
    assert score_answer("3/4", "0.75", NumberRules(0.0, True)).correct is True
    assert score_answer("0.7501", "0.75", NumberRules(0.0, True)).correct is False  # no tolerance: exact
    v = score_answer("3.1416", "3.14159", NumberRules(0.001))
    assert v.reason == "number: equal within 0.001" and v.normalized_prediction == "3.1416"


def test_parse_fraction():
    assert parse_fraction(" -3 / 4 ") == -0.75
    assert parse_fraction("3/0") is None and parse_fraction("3.5/2") is None and parse_fraction("a/b") is None


@pytest.mark.parametrize("settings,words", [
    ({"numeric_tolerance": -1}, "numeric_tolerance must be a number >= 0"),
    ({"numeric_tolerance": "1e-3"}, "numeric_tolerance must be a number >= 0"),
    ({"numeric_tolerance": True}, "numeric_tolerance must be a number >= 0"),
    ({"fractions": "yes"}, "fractions must be true or false"),
])
def test_bad_settings_are_one_line_errors(settings, words):
    with pytest.raises(ConfigError, match=words):
        build_metric({"name": "gaia", **settings})


def test_default_identity_is_unchanged():
    """The official metric's judge fingerprint does not move: no run judged before goes stale."""
    assert build_metric("gaia").identity() == {"metric": "gaia", "settings": {}}


def test_through_the_api(home):
    rows = [{"id": "pi", "question": "pi to 4 places?", "answer": "3.1416"},
            {"id": "frac", "question": "three quarters?", "answer": "3/4"},
            {"id": "far", "question": "one tenth?", "answer": "0.1"}]
    replies = {"pi to 4 places?": "3.14159", "three quarters?": "0.75", "one tenth?": "0.2"}

    def agent(question: str) -> str:
        return replies[question]

    official = evalpipe.evaluate(agent=agent, dataset=rows, metrics=["gaia"], name="gaiatol", model_name="official")
    lenient = evalpipe.evaluate(agent=agent, dataset=rows, metrics=[LENIENT], name="gaiatol", model_name="lenient")
    assert official.success and lenient.success, (official.errors, lenient.errors)
    assert official.score("gaia") == 0.0
    assert lenient.score("gaia") == pytest.approx(2 / 3)
