"""`kaggle`: a Kaggle-style `submission.csv`, checked offline (DSGym lists `kaggle` as "submission format
validation"; its `kaggle_submission` metric uploads the file to Kaggle, which evalpipe never does).

The prediction is the path of the submission CSV (as DSGym's agents answer), or the CSV text itself (a reply with a
newline). The sample's format reference is `sample_submission` in its metadata (a path) or else its target (a path
or CSV text). The submission is valid (score 1) when it reads as a CSV, has the reference's columns in the same
order, as many rows, and the same ids in the first column (any order); each failed check is named in
`details["problems"]`. Without a format reference the sample is unscored.

When the metadata also gives an `answer_key` (CSV: id column, then the target column) and an `eval_metric` (`rmse`,
`rmsle`, `mae`, `accuracy`, `auc`, `log_loss`: DSGym's local scorers, plus `mae`), a valid submission is scored
against it (`details["submission_score"]`, rows matched on the id); with a `leaderboard` too (a list of scores,
best first as Kaggle lists them), `details` adds its rank, medal, percentile and whether it beats the median, by
DSGym's `get_leaderboard_rank_medal` (Kaggle's medal tiers by number of teams).
"""
from __future__ import annotations

import io
import math
import statistics
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Score
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import KaggleSettings

LOWER_IS_BETTER = {"rmse": True, "rmsle": True, "mae": True, "log_loss": True, "accuracy": False, "auc": False}


def read_csv(text_or_path: str, base: Path | None = None) -> pd.DataFrame:
    """A CSV given as text (holds a newline) or as a path (relative ones under `base`)."""
    text = text_or_path.strip()
    if "\n" in text:
        return pd.read_csv(io.StringIO(text))
    path = Path(text).expanduser()
    if not path.is_absolute() and base is not None:
        path = base / path
    if not path.is_file():
        raise FileNotFoundError(f"no file {path}")
    return pd.read_csv(path)


def format_problems(submission: pd.DataFrame, reference: pd.DataFrame) -> list[str]:
    """What keeps `submission` from having `reference`'s format (empty: valid)."""
    problems = []
    if list(submission.columns) != list(reference.columns):
        problems.append(f"columns {list(submission.columns)} != {list(reference.columns)}")
    if len(submission) != len(reference):
        problems.append(f"{len(submission)} rows != {len(reference)}")
    if len(submission.columns) and len(reference.columns):
        ids, expected = submission.iloc[:, 0].astype(str), reference.iloc[:, 0].astype(str)
        if ids.duplicated().any():
            problems.append("duplicate ids")
        missing, extra = set(expected) - set(ids), set(ids) - set(expected)
        if missing or extra:
            problems.append(f"ids differ: {len(missing)} missing, {len(extra)} unexpected")
    return problems


def local_score(submission: pd.DataFrame, answer_key: pd.DataFrame, eval_metric: str) -> float:
    """DSGym's local scorers: the answer key's second column against the submission's, rows matched on the id."""
    id_col, target_col = answer_key.columns[0], answer_key.columns[1]
    pred_col = target_col if target_col in submission.columns else submission.columns[1]
    merged = answer_key[[id_col, target_col]].merge(submission[[id_col, pred_col]], on=id_col,
                                                    suffixes=("_true", "_pred"))
    if merged.empty:
        raise ValueError("no submission id matches the answer key")
    true_col = f"{target_col}_true" if f"{target_col}_true" in merged.columns else target_col
    pred_col = f"{pred_col}_pred" if f"{pred_col}_pred" in merged.columns else pred_col
    y_true, y_pred = merged[true_col].to_numpy(), merged[pred_col].to_numpy()
    if eval_metric == "accuracy":
        return float(np.mean(y_true.astype(str) == y_pred.astype(str)))
    y_true, y_pred = y_true.astype(float), y_pred.astype(float)
    if eval_metric == "rmse":
        return float(np.sqrt(np.mean((y_true - y_pred) ** 2)))
    if eval_metric == "rmsle":  # negatives clipped to 0 before log1p, as DSGym
        return float(np.sqrt(np.mean((np.log1p(np.clip(y_true, 0, None)) - np.log1p(np.clip(y_pred, 0, None))) ** 2)))
    if eval_metric == "mae":
        return float(np.mean(np.abs(y_true - y_pred)))
    from sklearn.metrics import log_loss, roc_auc_score  # scikit-learn is pinned; imported only when used

    return float(roc_auc_score(y_true, y_pred) if eval_metric == "auc" else log_loss(y_true, y_pred))


def leaderboard_placement(leaderboard: list[float], score: float) -> dict[str, Any]:
    """Rank, medal, percentile and above-median of `score` among `leaderboard` (DSGym's
    `get_leaderboard_rank_medal`). The board's order says which way is better: first > last means higher is better."""
    if not leaderboard:
        return {"rank": 1, "medal": "gold", "percentile": 100.0, "above_median": True}
    higher_is_better = leaderboard[0] > leaderboard[-1]
    combined = sorted(list(leaderboard) + [score], reverse=higher_is_better)
    rank, total = combined.index(score) + 1, len(combined)
    if total <= 99:
        gold, silver, bronze = math.ceil(0.10 * total), math.ceil(0.20 * total), math.ceil(0.40 * total)
    elif total <= 249:
        gold, silver, bronze = min(10, total), math.ceil(0.20 * total), math.ceil(0.40 * total)
    elif total <= 999:
        gold, silver, bronze = min(total, 10 + math.ceil(0.002 * total)), min(50, total), min(100, total)
    else:
        gold, silver, bronze = min(total, 10 + math.ceil(0.002 * total)), math.ceil(0.05 * total), \
            math.ceil(0.10 * total)
    medal = "gold" if rank <= gold else "silver" if rank <= silver else "bronze" if rank <= bronze else "none"
    worse = sum(1 for s in leaderboard if (s < score if higher_is_better else s > score))
    equal = sum(1 for s in leaderboard if s == score)
    median = statistics.median(leaderboard)
    return {"rank": rank, "medal": medal, "percentile": round(100.0 * (worse + 0.5 * equal) / len(leaderboard), 6),
            "above_median": score > median if higher_is_better else score < median}


@register_metric("kaggle")
class Kaggle(Metric):
    """A Kaggle submission CSV: valid format (1/0); scored and placed on a leaderboard when the sample says how."""

    name = "kaggle"
    option_schema = KaggleSettings
    inputs = frozenset({"target", "prediction", "metadata"})
    requires_target = False  # the format reference may come from the metadata

    def __init__(self, **settings):
        super().__init__(**settings)
        self.base_dir = Path(settings["base_dir"]).expanduser() if settings.get("base_dir") else None

    def score(self, item: JudgeInput) -> Score:
        meta = item.metadata or {}
        reference_spec = meta.get("sample_submission") or item.target
        if not reference_spec:
            return Score.unscored("no sample_submission (metadata) or target to check the format against")
        try:
            reference = read_csv(str(reference_spec), self.base_dir)
        except (OSError, ValueError) as exc:
            return Score.error(f"format reference unreadable: {exc}")
        try:
            submission = read_csv(item.prediction or "", self.base_dir)
        except (OSError, ValueError) as exc:
            return Score(value=0.0, correct=False, reason=f"submission unreadable: {exc}",
                         details={"problems": ["unreadable"]})
        problems = format_problems(submission, reference)
        details: dict[str, Any] = {"problems": problems, "rows": len(submission)}
        eval_metric = meta.get("eval_metric")
        if not problems and meta.get("answer_key") and eval_metric:
            if eval_metric not in LOWER_IS_BETTER:
                raise ConfigError(f"kaggle: eval_metric {eval_metric!r} of sample {item.sample_id} is not one of "
                                  f"{sorted(LOWER_IS_BETTER)}")
            try:
                value = local_score(submission, read_csv(str(meta["answer_key"]), self.base_dir), eval_metric)
            except (OSError, ValueError) as exc:
                details["score_error"] = str(exc)
            else:
                details.update(submission_score=value, eval_metric=eval_metric,
                               lower_is_better=LOWER_IS_BETTER[eval_metric])
                if meta.get("leaderboard"):
                    details.update(leaderboard_placement([float(s) for s in meta["leaderboard"]], value))
        ok = not problems
        return Score(value=1.0 if ok else 0.0, correct=ok, reason="; ".join(problems), details=details)
