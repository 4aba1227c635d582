"""[sweeps] What a cached partition costs, cut without changing what it records (issue 31): the data versions,
the instance's event rows and the warehouse files stay as they were."""
import hashlib

import numpy as np
import pandas as pd
import pytest

from evalpipe.core.fingerprint import canonical_json


def _old_content_version(frames, columns=None, **fixed) -> str:
    """ContentVersion as first written (pandas categorizing object columns before hashing them)."""
    sha = hashlib.sha256(canonical_json(fixed).encode())
    for df in frames:
        cols = [c for c in (columns or sorted(df.columns)) if c in df.columns]
        sha.update(canonical_json(cols).encode())
        if len(df):
            sha.update(pd.util.hash_pandas_object(df[cols].astype(str), index=False).values.tobytes())
    return sha.hexdigest()[:16]


FRAMES = [
    pd.DataFrame({"sample_id": ["a", "b", "a", "c"], "prediction": ["x", None, "x", "é ünïcode \x00"],
                  "score": [1.0, np.nan, 0.5, 1.0], "n": [1, 2, 3, 4], "ok": [True, False, True, True],
                  "turns": [[1, 2], None, [], {"k": "v"}], "empty": ["", "", None, ""]}),
    pd.DataFrame({"sample_id": pd.Series([], dtype=object), "prediction": pd.Series([], dtype=object)}),
    pd.DataFrame({"sample_id": ["s"] * 50, "value": list(range(50)), "none": [None] * 50,
                  "cat": pd.Categorical(["u", "v"] * 25)}),
]


@pytest.mark.parametrize("columns", [None, ["sample_id", "prediction", "missing"], ["n", "turns", "score", "sample_id"]])
def test_content_version_is_the_hash_it_always_was(columns):
    from eval_assets.assets import ContentVersion, frame_version

    v = ContentVersion(columns, fingerprint="fp", other=None)
    for df in FRAMES:
        v.add(df)
    assert v.version().value == _old_content_version(FRAMES, columns, fingerprint="fp", other=None)
    for df in FRAMES:
        assert frame_version(df, columns).value == _old_content_version([df], columns)
