"""pass^k as tau2-bench computes it (`src/tau2/metrics/agent_metrics.py`, read there): for each task with n trials
of which c succeeded (reward within 1e-6 of 1), C(c, k) / C(n, k); the reported pass^k is the mean over tasks, for
k = 1 .. the smallest trial count of any task. Here each row also gets a seeded percentile-bootstrap interval over
tasks (the official code reports none)."""
from __future__ import annotations

import math
from typing import Any

import numpy as np


def is_success(reward: float) -> bool:
    return (1 - 1e-6) <= reward <= (1 + 1e-6)


def pass_hat_k(n: int, c: int, k: int) -> float:
    if n < k:
        raise ValueError(f"pass^{k} needs at least {k} trials per task, got {n}")
    return math.comb(c, k) / math.comb(n, k)


def pass_hat_k_rows(metric: str, counts: list[tuple[int, int]], seed: int) -> list[dict[str, Any]]:
    """`<metric>_pass^k` rows (slice `all`) from per-task (trials, successes)."""
    if not counts:
        return []
    from evalpipe.metrics.aggregate import bootstrap_ci

    max_k = min(n for n, _ in counts)
    rows = []
    for k in range(1, max_k + 1):
        vals = np.array([pass_hat_k(n, c, k) for n, c in counts], dtype=float)
        lo, hi = bootstrap_ci(vals, seed)
        rows.append({"metric": f"{metric}_pass^{k}", "slice": "all", "value": float(vals.mean()), "n": len(vals),
                     "n_unscored": 0, "n_errors": 0,
                     "stderr": float(vals.std(ddof=1) / np.sqrt(len(vals))) if len(vals) > 1 else float("nan"),
                     "ci_low": lo, "ci_high": hi})
    return rows
