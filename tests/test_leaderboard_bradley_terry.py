"""`evalpipe leaderboard` prints the Bradley-Terry table (`review_ranking`, source `all`) after the accuracy board
when it has rows (issue 35), and nothing of it when it has none."""
import pandas as pd

from tests.helpers.cli import cli_in_process

SPLIT = "gaia/validation"
A, B = "gpt-4o-mini", "smollm2-135m"


def _ranking(source: str, strengths: dict[str, float | None], note: str | None = None) -> list[dict]:
    return [{"benchmark_split": SPLIT, "source": source, "rank": i + 1 if s is not None else None, "model": m,
             "strength": s, "ci_low": None if s is None else s - 0.5, "ci_high": None if s is None else s + 0.5,
             "wins": 2.0 if i == 0 else 1.0, "comparisons": 3, "n": 3, "resamples": 200, "resamples_fitted": 200,
             "note": note} for i, (m, s) in enumerate(strengths.items())]


def test_leaderboard_prints_the_bradley_terry_table_after_the_board(home, monkeypatch):
    from evalpipe.viewer.demo import build

    wh = build(home / "warehouse.duckdb", 12, with_judge=True)
    monkeypatch.setenv("EVALS_WAREHOUSE", str(wh.duckdb_path))
    cli = cli_in_process(monkeypatch)
    before = cli("leaderboard")
    assert before.exit_code == 0, before.output
    assert "Bradley-Terry" not in before.output  # no preferences: no table

    wh.write("review_ranking", pd.DataFrame(_ranking("all", {A: 0.3466, B: -0.3466})
                                            + _ranking("judge", {B: 0.9, A: -0.9})), {})
    out = cli("leaderboard").output
    board, ranking = out.split("Bradley-Terry ranking")
    assert A in board and "review_ranking" in ranking.splitlines()[0]
    lines = [x for x in ranking.splitlines() if SPLIT in x]
    assert len(lines) == 2 and A in lines[0] and "0.3466" in lines[0] and B in lines[1]  # source all only, best first
    assert "0.9000" not in ranking  # the judge-only fit is not this table

    only = cli("leaderboard", "--split", SPLIT).output
    assert "Bradley-Terry ranking" in only
