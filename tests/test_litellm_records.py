"""The litellm path keeps its records while it spares litellm per-call work (docs/runners.md, "The litellm runner").

Against a real loopback HTTP server (benchmarks/mock_server.py) and litellm's own success callbacks.
"""
import asyncio

import pytest

from benchmarks.mock_server import MockLLM, serve_in_thread
from evalpipe.core.config import ModelConfig
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.runners.pricing import import_litellm
from evalpipe.core.types import RolloutRequest

pytestmark = pytest.mark.slow  # imports litellm (3-15 s)


@pytest.fixture
def mock():
    with serve_in_thread(MockLLM()) as (m, url):
        m.url = url
        yield m


CALLBACK_LISTS = ("callbacks", "input_callback", "success_callback", "failure_callback", "_async_success_callback",
                  "_async_failure_callback")


@pytest.fixture
def no_litellm_callbacks(monkeypatch):
    """Fresh, empty litellm callback lists for this test (restored after it)."""
    litellm = import_litellm()
    for name in CALLBACK_LISTS:
        monkeypatch.setattr(litellm, name, [])
    return litellm


def cost_capture(seen: list):
    """A litellm callback that keeps the cost litellm itself computed for each reply, as callbacks receive it."""
    from litellm.integrations.custom_logger import CustomLogger

    class Capture(CustomLogger):
        async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
            payload = kwargs.get("standard_logging_object") or {}
            seen.append((kwargs.get("response_cost"), payload.get("response_cost")))

    return Capture()


@pytest.fixture
def litellm_costs(no_litellm_callbacks):
    seen: list[tuple[object, object]] = []
    no_litellm_callbacks.callbacks.append(cost_capture(seen))  # litellm copies it to its per-event lists per call
    return seen


def run_one(mock, model: str, **kw) -> dict:
    cfg = ModelConfig(key="m", runner="litellm", model=model, api_base=mock.url,
                      options={"fast_path": False, **kw.pop("options", {})}, **kw)
    req = RolloutRequest(sample_id="s0", messages=[{"role": "user", "content": "one two three"}], fingerprint="fp")

    async def go():
        rows = await run_requests(build_runner(cfg), [req], None, RunSettings(concurrency=1, timeout_s=10))
        for _ in range(100):  # litellm logs success in a background task of this loop
            await asyncio.sleep(0.02)
        return rows[0]

    return asyncio.run(go())


@pytest.mark.parametrize("model, options, price_in, price_out, litellm_says", [
    ("openai/gpt-4o-mini", {}, None, None, "cost"),  # price None: litellm's cost map
    ("openai/my-finetune", {}, 0.0, 0.0, None),  # no price anywhere (litellm: "unknown", its payload: 0)
    ("openai/my-finetune", {"pricing": {"input_cost_per_mtok": 1.0, "output_cost_per_mtok": 2.0}}, 1e-6, 2e-6, "cost"),
])
def test_with_litellm_callbacks_they_get_litellm_s_cost_and_it_equals_the_recorded_one(
        mock, litellm_costs, model, options, price_in, price_out, litellm_says):
    litellm = import_litellm()
    entry_before = dict(litellm.model_cost.get(model.split("/", 1)[1]) or {})
    size_before = len(litellm.model_cost)
    if price_in is None:
        entry = litellm.model_cost["gpt-4o-mini"]
        price_in, price_out = entry["input_cost_per_token"], entry["output_cost_per_token"]
        assert price_in > 0 and price_out > 0

    row = run_one(mock, model, options=options)

    assert (row["status"], row["input_tokens"], row["output_tokens"]) == ("ok", 3, 4)
    assert row["cost"] == pytest.approx(3 * price_in + 4 * price_out, abs=0)
    cost = pytest.approx(row["cost"], abs=1e-15)
    assert litellm_costs == [(cost if litellm_says else None, cost)]  # litellm's logging runs once per call
    # prices handed to litellm are litellm-side settings: not sent to the provider, not written to its map
    assert set(mock.bodies[-1]) == {"model", "messages"}
    assert len(litellm.model_cost) == size_before
    assert dict(litellm.model_cost.get(model.split("/", 1)[1]) or {}) == entry_before


def test_without_litellm_callbacks_litellm_is_handed_the_prices_once_looked_up(mock, no_litellm_callbacks, monkeypatch):
    """Nothing consumes litellm's own pricing: it gets ours (no search of its cost map per call), and the figure it
    stamps on the response still equals the recorded cost."""
    litellm = no_litellm_callbacks
    real, calls = litellm.acompletion, []

    async def spy(**kwargs):  # the real call, observed
        resp = await real(**kwargs)
        calls.append((kwargs.get("input_cost_per_token"), kwargs.get("output_cost_per_token"),
                      resp._hidden_params.get("response_cost")))
        return resp

    monkeypatch.setattr(litellm, "acompletion", spy)
    row = run_one(mock, "openai/gpt-4o-mini")
    entry = litellm.model_cost["gpt-4o-mini"]
    assert row["status"] == "ok" and row["cost"] == pytest.approx(3 * entry["input_cost_per_token"] +
                                                                   4 * entry["output_cost_per_token"], abs=0)
    assert calls == [(entry["input_cost_per_token"], entry["output_cost_per_token"],
                      pytest.approx(row["cost"], abs=1e-15))]
    assert set(mock.bodies[-1]) == {"model", "messages"}


def test_callbacks_given_per_request_in_params_also_get_litellm_s_own_pricing(mock, no_litellm_callbacks):
    seen: list[tuple[object, object]] = []
    row = run_one(mock, "openai/my-finetune", params={"callbacks": [cost_capture(seen)]})
    assert row["status"] == "ok" and row["cost"] == 0.0
    assert seen == [(None, 0.0)]  # litellm's own verdict on a model it has no price for (handed 0/0 it says 0.0)
