"""pass@k over samples grouped by task (`<task>#<i>`): plain arithmetic, apart from the code_execution metric that
produces the verdicts, so that the aggregation (and the viewer that shows it) need not import the sandbox."""
from __future__ import annotations

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c passed: 1 - C(n-c, k) / C(n, k), as a stable product."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per task, got {n}")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def task_of(sample_id: str) -> str:
    """Samples of one task are named `<task>#<i>`."""
    return sample_id.split("#", 1)[0]
