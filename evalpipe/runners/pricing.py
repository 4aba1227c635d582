"""Prices per token from litellm's cost map, and the one place litellm is imported.

Both API paths price a reply the same way: per-token prices are looked up once per runner (not per sample)
and multiplied by the reply's usage. A model without a price costs 0; a lookup never raises.

The fast path doesn't import litellm (its import takes 3-8 s of CPU): it reads the same JSON cost map litellm
ships and reads offline (`model_prices_and_context_window_backup.json`). Once litellm is imported anyway (the
litellm path, a judge), its live `litellm.model_cost` is used instead, so prices registered at run time count.
"""
from __future__ import annotations

import importlib.util
import json
import logging
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any


def import_litellm() -> Any:
    """litellm, imported offline and quiet: no cost-map download at import, no debug banners."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    import warnings

    with warnings.catch_warnings():  # its pydantic models warn at import; nothing a user can act on
        warnings.simplefilter("ignore")
        import litellm

    litellm.suppress_debug_info = True
    litellm.telemetry = False
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)
    return litellm


@lru_cache(maxsize=1)
def _shipped_cost_map() -> dict[str, Any]:
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        return {}
    path = Path(list(spec.submodule_search_locations)[0]) / "model_prices_and_context_window_backup.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def cost_map() -> dict[str, Any]:
    mod = sys.modules.get("litellm")
    live = getattr(mod, "model_cost", None) if mod is not None else None
    return live if isinstance(live, dict) and live else _shipped_cost_map()


def token_prices(model: str | None, provider: str | None = None,
                 override: dict[str, Any] | None = None, batch: bool = False) -> tuple[float, float]:
    """(USD per input token, USD per output token); (0, 0) when the model has no price.
    `override` (the model's `options.pricing`: input_cost_per_token / output_cost_per_token, or the same per
    million tokens as input_cost_per_mtok / output_cost_per_mtok) wins over the cost map.
    `batch`: the provider's batch-API rate (`*_cost_per_token_batches` in the map or in `pricing`); a model with a
    live price but no batch rate raises ValueError (a batch run is never priced at a guess)."""
    if batch:
        return _batch_prices(model, provider, override)
    if override:
        def pick(kind: str) -> float:
            if f"{kind}_cost_per_token" in override:
                return float(override[f"{kind}_cost_per_token"])
            return float(override.get(f"{kind}_cost_per_mtok", 0.0)) / 1e6

        return pick("input"), pick("output")
    if not model:
        return 0.0, 0.0
    table = cost_map()
    bare = model.split("/", 1)[1] if provider and model.startswith(provider + "/") else model
    for key in dict.fromkeys(k for k in (model, f"{provider}/{bare}" if provider else None, bare) if k):
        entry = table.get(key)
        if not isinstance(entry, dict):
            continue
        if key == bare and key != model and entry.get("litellm_provider") != provider:
            continue  # a self-hosted "llama-3-8b" must not be priced at some provider's rates
        try:
            return float(entry.get("input_cost_per_token") or 0.0), float(entry.get("output_cost_per_token") or 0.0)
        except (TypeError, ValueError):
            return 0.0, 0.0
    return 0.0, 0.0


def _entry(model: str | None, provider: str | None) -> dict[str, Any]:
    if not model:
        return {}
    table = cost_map()
    bare = model.split("/", 1)[1] if provider and model.startswith(provider + "/") else model
    for key in dict.fromkeys(k for k in (model, f"{provider}/{bare}" if provider else None, bare) if k):
        entry = table.get(key)
        if isinstance(entry, dict) and not (key == bare and key != model and entry.get("litellm_provider") != provider):
            return entry
    return {}


def _batch_prices(model: str | None, provider: str | None, override: dict[str, Any] | None) -> tuple[float, float]:
    source = override if override else _entry(model, provider)
    keys = ("input_cost_per_token_batches", "output_cost_per_token_batches")
    if all(source.get(k) is not None for k in keys):
        return float(source[keys[0]]), float(source[keys[1]])
    live = token_prices(model, provider, override)
    if live == (0.0, 0.0):
        return live  # unpriced (a local server): free either way
    where = "options.pricing" if override else "litellm's price map"
    raise ValueError(f"{where} has no batch rate for {model!r}; add input_cost_per_token_batches and "
                     "output_cost_per_token_batches under the model's options.pricing")
