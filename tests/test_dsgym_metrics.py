"""DSGym's `dabstep` and `kaggle` metrics on hand-made cases, checked against the official rules (DABStep's
`question_scorer`; DSGym's `get_leaderboard_rank_medal` and local scorers)."""
import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.metrics import build_metric
from evalpipe.metrics.base import JudgeInput
from evalpipe.metrics.kaggle import leaderboard_placement


def dabstep(prediction, target, **settings):
    metric = build_metric({"name": "dabstep", **settings})
    return metric.score(JudgeInput("s1", "q", target, prediction))


@pytest.mark.parametrize("prediction,target,right", [
    ("1,000", "1000", True),            # a formatted number on one side: both read as numbers
    ("$12,345.67", "12345.67", True),
    ("0,99", "0.99", False),            # "0,99" is formatted, read as 99 (commas dropped)
    ("0.12345", "0.1234", True),        # both below 1: within 1e-4
    ("0.1236", "0.1234", False),
    ("12.35", "12.3456", True),         # rounded to the fewer decimals (2): 12.35 == 12.35
    ("12.4", "12.3456", False),         # rounded to 1 decimal: 12.4 vs 12.3
    ("-5", "5", True),                  # the official scorer reads no sign
    ("64", "64.0", True),
    ("The answer is 42 units", "42", True),  # first number of each side
    ("A, B, C", "c;b;a", True),         # lists: sorted, separators , or ;
    ("[NexPay, GlobalCard]", "GlobalCard, NexPay", True),
    ("A, B", "A, B, C", False),         # another length
    ("1.00, 2", "1, 2.0", True),        # list items compared by the same rules
    ("", "", True),
    ("NexPay", "nexpay", True),         # case
    ("Nex-Pay!", "nexpay", True),       # non-word characters dropped
    ("NexPay", "The merchant NexPay", True),  # one side a single word: subset
    ("global card network", "global card", False),  # neither a single word; similarity below 0.95
    ("Not Applicable", "not applicable.", True),
    ("yes", "no", False),
])
def test_dabstep_follows_the_official_scorer(prediction, target, right):
    score = dabstep(prediction, target)
    assert score.correct is right and score.value == (1.0 if right else 0.0)


def test_dabstep_rule_dsgym_is_dsgym_exact_match_and_no_reference_is_unscored():
    assert dabstep(" NexPay ", "nexpay", rule="dsgym").correct is True
    assert dabstep("1,000", "1000", rule="dsgym").correct is False  # the official scorer says right
    assert dabstep("1,000", None).status == "unscored"
    assert dabstep(None, "5").correct is False
    with pytest.raises(ConfigError, match="setting rule must be official or dsgym"):
        build_metric({"name": "dabstep", "rule": "fuzzy"})


SAMPLE = "id,target\n1,0\n2,0\n3,0\n"


def kaggle(prediction, target=SAMPLE, **metadata):
    return build_metric("kaggle").score(JudgeInput("k1", "q", target, prediction, metadata=metadata))


def test_kaggle_checks_the_submission_format(tmp_path):
    good = tmp_path / "submission.csv"
    good.write_text("id,target\n3,0.5\n1,0.1\n2,0.2\n")
    assert kaggle(str(good)).correct is True  # a path; ids in any order
    assert kaggle("id,target\n1,1\n2,1\n3,1\n").correct is True  # CSV text
    wrong_cols = kaggle("id,prediction\n1,1\n2,1\n3,1\n")
    assert wrong_cols.correct is False and "columns" in wrong_cols.reason
    short = kaggle("id,target\n1,1\n2,1\n")
    assert short.correct is False and "2 rows != 3" in short.reason and "1 missing" in short.reason
    dup = kaggle("id,target\n1,1\n1,1\n2,1\n")
    assert dup.correct is False and "duplicate ids" in dup.reason
    missing = kaggle(str(tmp_path / "nope.csv"))
    assert missing.correct is False and "unreadable" in missing.reason
    sample = tmp_path / "sample_submission.csv"
    sample.write_text(SAMPLE)
    assert kaggle(str(good), target=None, sample_submission=str(sample)).correct is True
    assert kaggle(str(good), target=None).status == "unscored"


def test_kaggle_scores_against_an_answer_key_and_places_it_on_the_leaderboard(tmp_path):
    key = tmp_path / "answers.csv"
    key.write_text("id,target\n1,1\n2,2\n3,3\n")
    score = kaggle("id,target\n1,1\n2,2\n3,6\n", answer_key=str(key), eval_metric="rmse",
                   leaderboard=[0.5, 1.0, 2.0, 3.0])  # rmse: lower is better, so the board ascends
    assert score.correct is True
    assert score.details["submission_score"] == pytest.approx(3 ** 0.5)
    assert score.details["rank"] == 3 and score.details["percentile"] == 50.0  # 2 of 4 worse
    assert score.details["above_median"] is False
    acc = kaggle("id,target\n1,1\n2,2\n3,0\n", answer_key=str(key), eval_metric="accuracy")
    assert acc.details["submission_score"] == pytest.approx(2 / 3)
    with pytest.raises(ConfigError, match="eval_metric 'f1'"):
        kaggle("id,target\n1,1\n2,2\n3,0\n", answer_key=str(key), eval_metric="f1")


def test_leaderboard_placement_follows_dsgyms_medal_tiers():
    board = [float(100 - i) for i in range(19)]  # 19 teams, higher is better; with ours 20: gold top 2
    assert leaderboard_placement(board, 99.5)["medal"] == "gold"  # rank 2
    assert leaderboard_placement(board, 97.5)["medal"] == "silver"  # rank 4 <= ceil(0.2*20)
    assert leaderboard_placement(board, 93.5)["medal"] == "bronze"  # rank 8 <= ceil(0.4*20)
    low = leaderboard_placement(board, 50.0)
    assert low["medal"] == "none" and low["rank"] == 20 and low["percentile"] == 0.0
    tie = leaderboard_placement([3.0, 2.0, 1.0], 2.0)
    assert tie["percentile"] == pytest.approx(100 * 1.5 / 3) and tie["above_median"] is False
    big = [float(1000 - i) for i in range(299)]  # 300 teams: gold is the top 10 + ceil(0.6) = 11
    assert leaderboard_placement(big, 990.5)["medal"] == "gold"  # rank 11
    assert leaderboard_placement(big, 989.5)["medal"] == "silver"  # rank 12 <= 50
    assert leaderboard_placement([], 1.0)["medal"] == "gold"
