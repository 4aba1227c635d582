"""Batch mode (issue 34, `options.batch: true`): a partition's requests go through an OpenAI-compatible files +
batches API (a loopback one, tests/helpers/batch_server.py), polled, resumable across restarts (the batch id is
journaled), priced at the batch rate, and answering exactly as a live run does."""
import asyncio

import pytest

from benchmarks.mock_server import serve_in_thread
from evalpipe.core.errors import ConfigError
from evalpipe.core.types import RolloutRequest
from evalpipe.runners import RunSettings, build_runner, run_requests
from evalpipe.store.journal import Journal
from tests.helpers.batch_server import BatchMock
from tests.helpers.priced import PRICE_IN, PRICE_OUT, PRICING, priced_model

BATCH_PRICING = {**PRICING, "input_cost_per_token_batches": PRICE_IN / 2, "output_cost_per_token_batches": PRICE_OUT / 2}


def _requests(n: int = 12) -> list[RolloutRequest]:
    return [RolloutRequest(sample_id=f"s{i}", messages=[{"role": "user", "content": f"what is {i} plus {i}"}],
                           fingerprint=f"fp{i}") for i in range(n)]


def _run(model, journal_path, n=12):
    with Journal(journal_path) as journal:
        return asyncio.run(run_requests(build_runner(model), _requests(n), journal, RunSettings(concurrency=4)))


def test_a_batch_run_equals_a_live_run_at_the_batch_price(tmp_path):
    with serve_in_thread(BatchMock()) as (mock, url):
        live = _run(priced_model(url, pricing=BATCH_PRICING), tmp_path / "live.sqlite")
        batch = _run(priced_model(url, batch=True, batch_poll_s=0.01, pricing=BATCH_PRICING), tmp_path / "b.sqlite")
    assert mock.batches_created == 1 and len(mock.served) == 24
    assert [r["status"] for r in batch] == ["ok"] * 12
    assert [r["raw_output"] for r in batch] == [r["raw_output"] for r in live]
    assert [(r["input_tokens"], r["output_tokens"]) for r in batch] == [(r["input_tokens"], r["output_tokens"])
                                                                         for r in live]
    for b, lv in zip(batch, live):
        assert b["cost"] == pytest.approx(lv["cost"] / 2)


def test_a_restarted_run_polls_the_journaled_batch_instead_of_submitting_again(tmp_path):
    with serve_in_thread(BatchMock()) as (mock, url):
        model = priced_model(url, batch=True, batch_poll_s=0.01, pricing=BATCH_PRICING)
        mock.hold = True  # the provider is slow: the run is stopped while it polls

        async def interrupted():
            with Journal(tmp_path / "j.sqlite") as journal:
                task = asyncio.ensure_future(run_requests(build_runner(model), _requests(), journal,
                                                          RunSettings(concurrency=4)))
                await asyncio.sleep(0.3)
                task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(interrupted())
        assert mock.batches_created == 1 and not mock.served
        mock.hold = False
        rows = _run(model, tmp_path / "j.sqlite")  # the restart
        assert mock.batches_created == 1  # polled the same batch: not submitted (nor paid for) twice
        assert [r["status"] for r in rows] == ["ok"] * 12 and len(mock.served) == 12
        again = _run(model, tmp_path / "j.sqlite")  # everything journaled: nothing sent
        assert all(r["cached"] for r in again) and mock.batches_created == 1


def test_batch_mode_without_a_batch_price_is_refused_before_any_call():
    with pytest.raises(ConfigError, match="no batch rate"):
        build_runner(priced_model("http://127.0.0.1:9/v1", batch=True))


def test_batch_mode_needs_an_openai_compatible_endpoint():
    from evalpipe.core.config import ModelConfig

    m = ModelConfig.from_dict("c", {"runner": "litellm", "model": "anthropic/claude-3-5-haiku-20241022",
                                    "options": {"batch": True}})
    with pytest.raises(ConfigError, match="options.batch needs an OpenAI-compatible endpoint"):
        build_runner(m)
