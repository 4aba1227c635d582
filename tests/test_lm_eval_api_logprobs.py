"""lm-eval log-likelihood / multiple-choice tasks on OpenAI-compatible endpoints that echo prompt logprobs (issue 23):
the `litellm` runner's `loglikelihood` reads them from the legacy `/completions` endpoint as lm-eval's own
`local-completions` model does. Both run here against the same loopback server (tests/helpers/mock_servers.py) and
must agree on every per-sample log-likelihood and is_greedy, and on acc / acc_norm."""
import json

import pytest

pytest.importorskip("lm_eval")

from benchmarks.mock_server import serve_in_thread  # noqa: E402
from evalpipe.core.config import ModelConfig  # noqa: E402
from evalpipe.core.errors import ConfigError  # noqa: E402
from tests.helpers.mock_servers import LogprobsMock  # noqa: E402
from tests.test_interop_lm_eval import run_here, split_of, task_dir  # noqa: E402,F401  (task_dir: a fixture)


def endpoint_model(base_url: str) -> ModelConfig:
    return ModelConfig(key="served", runner="litellm", model="openai/mock", api_base=base_url,
                       params={"max_tokens": 8})


def lm_eval_local_completions(task_dir, task, base_url):
    """lm-eval's own run of `task` with its `local-completions` model on the endpoint: (results, samples)."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.openai_completions import LocalCompletionsAPI
    from lm_eval.tasks import TaskManager, get_task_dict

    lm = LocalCompletionsAPI(base_url=f"{base_url}/completions", model="mock", tokenizer_backend="remote",
                             max_retries=1)
    tasks = get_task_dict([task], TaskManager(include_path=str(task_dir), include_defaults=False))
    tasks[task].set_fewshot_seed(seed=1234)
    out = evaluate(lm, tasks, log_samples=True)
    return out["results"][task], out["samples"][task]


def test_multiple_choice_on_an_endpoint_scores_as_lm_eval_local_completions(home, project_from, task_dir):
    split = split_of(project_from, task_dir, "tiny_mc")
    with serve_in_thread(LogprobsMock()) as (mock, base_url):
        _, rollouts, judgements, ours = run_here(split, endpoint_model(base_url), home)
        assert (rollouts["status"] == "ok").all(), rollouts["error"].tolist()
        # one request per sample, all its choices as a list of prompts, lm-eval's payload
        assert len(mock.requests) == 4 and len(mock.requests[0]["prompt"]) == 3
        assert {k: mock.requests[0][k] for k in ("echo", "logprobs", "max_tokens", "temperature")} == \
            {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
        theirs, their_samples = lm_eval_local_completions(task_dir, "tiny_mc", base_url)

    recorded = {sid: [tuple(p) for p in json.loads(raw)] for sid, raw in zip(rollouts["sample_id"],
                                                                           rollouts["raw_output"])}
    their_pairs = {str(s["doc_id"]): [tuple(r[0]) for r in s["resps"]] for s in their_samples}
    assert recorded == their_pairs  # exactly: the same tokens' logprobs summed in the same order
    greedy = [g for pairs in recorded.values() for _, g in pairs]
    assert True in greedy and False in greedy  # the mock makes both kinds: is_greedy is really compared
    for metric in ("acc", "acc_norm"):
        row = ours[f"lm_eval_{metric},none"]
        assert row.value == pytest.approx(theirs[f"{metric},none"]) and row.n == 4
    assert 0 < theirs["acc,none"] < 1  # a run where acc can tell a wrong sum from a right one
    by_sample = {sid: json.loads(d)["lm_eval"] for sid, d in zip(judgements["sample_id"], judgements["details"])}
    assert by_sample == {str(s["doc_id"]): {"acc,none": s["acc"], "acc_norm,none": s["acc_norm"]}
                         for s in their_samples}


def test_an_endpoint_without_prompt_logprobs_fails_each_sample_with_one_line(home, project_from, task_dir):
    split = split_of(project_from, task_dir, "tiny_mc")
    with serve_in_thread(LogprobsMock(logprobs=False)) as (_, base_url):
        _, rollouts, _, _ = _rollouts_only(split, endpoint_model(base_url), home)
    errors = set(rollouts["error"])
    assert len(errors) == 1
    (error,) = errors
    assert "\n" not in error and error.endswith("returned no prompt logprobs (echo: true, logprobs: 1); "
                                                "log-likelihood tasks need an endpoint that does (vLLM's OpenAI "
                                                "server), or runner: local")


def _rollouts_only(split, model, home):
    from evalpipe.pipeline import stages
    from evalpipe.runners import build_runner, run_settings_for

    prompts = stages.build_prompts(split, model.key, stages.build_dataset(split))
    rollouts = stages.run_rollouts(split, model, prompts, build_runner(model), run_settings_for(model),
                                   journal_file=home / "j.sqlite")
    return prompts, rollouts, None, None


def test_the_endpoint_runner_passes_the_check_and_a_non_openai_provider_is_refused(project_from, task_dir):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.runners import build_runner

    adapter = adapter_for(split_of(project_from, task_dir, "tiny_mc"))
    adapter.check_runner(build_runner(endpoint_model("http://127.0.0.1:9/v1")))  # no error, no call
    anthropic = ModelConfig(key="claude", runner="litellm", model="anthropic/claude-3-5-haiku-20241022")
    with pytest.raises(ConfigError, match="runner 'litellm' can't compute them: use runner: local, or runner: "
                                          "litellm with an OpenAI-compatible api_base that returns prompt logprobs"):
        adapter.check_runner(build_runner(anthropic))


def test_an_empty_context_is_refused_with_one_line():
    import asyncio

    from evalpipe.runners import build_runner
    from evalpipe.runners.base import ModelError

    runner = build_runner(endpoint_model("http://127.0.0.1:9/v1"))
    with pytest.raises(ModelError, match="empty context .* use runner: local"):
        asyncio.run(runner.loglikelihood([["", "some text"]]))


def test_a_chat_only_server_fails_each_sample_naming_the_endpoint_and_the_fix(home, project_from, task_dir):
    from benchmarks.mock_server import MockLLM

    split = split_of(project_from, task_dir, "tiny_mc")
    with serve_in_thread(MockLLM()) as (_, base_url):  # answers /chat/completions only: 404 on /completions
        _, rollouts, _, _ = _rollouts_only(split, endpoint_model(base_url), home)
    assert set(rollouts["error"]) == {f"{base_url}/completions: HTTP 404: not found; log-likelihood tasks need a "
                                      "completions endpoint that echoes prompt logprobs (vLLM's OpenAI server does), "
                                      "or runner: local"}


def test_trailing_spaces_and_long_continuations_match_lm_eval_request_by_request():
    import asyncio

    from lm_eval.api.instance import Instance
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from evalpipe.runners import build_runner

    pairs = [["Question: capital of France?\nAnswer: ", "Paris, the city of light"],  # space moves to the answer
             ["The sky is", " blue"], ["Two plus two  ", "equals four"], ["Say:", "!"]]
    async def score(base_url):
        runner = build_runner(endpoint_model(base_url))
        try:
            return await runner.loglikelihood(pairs)
        finally:
            await runner.aclose()

    with serve_in_thread(LogprobsMock()) as (_, base_url):
        ours = asyncio.run(score(base_url))
        lm = LocalCompletionsAPI(base_url=f"{base_url}/completions", model="mock", tokenizer_backend="remote",
                                 max_retries=1)
        theirs = lm.loglikelihood([Instance("loglikelihood", {}, tuple(p), idx=i) for i, p in enumerate(pairs)],
                                  disable_tqdm=True)
    assert ours == [tuple(t) for t in theirs]
    assert len({ll for ll, _ in ours}) == 4
