"""lm-eval `loglikelihood_rolling` (perplexity) tasks (issue 32): the rolling windows over the model's tokenizer and
max length, the sum of token log-likelihoods per document, and lm-eval's own process_results and aggregations
(word_perplexity, byte_perplexity, bits_per_byte). On the local runner they agree with lm-eval's `hf` model
(`simple_evaluate`) on the same model; on an OpenAI-compatible endpoint with prompt logprobs (a loopback server
answering from the same model) with lm-eval's `local-completions` model, the export included. The task
tests/data/lm_eval_task/tiny_ppl.yaml has documents longer than the small max length used here: windows roll."""
import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from benchmarks.mock_server import serve_in_thread  # noqa: E402
from evalpipe.core.config import ModelConfig  # noqa: E402
from evalpipe.core.errors import ConfigError  # noqa: E402
from tests.helpers.mock_servers import ModelLogprobsMock  # noqa: E402
from tests.test_interop_lm_eval import run_here, split_of, task_dir  # noqa: E402,F401  (task_dir: a fixture)
from tests.test_lm_eval_api_logprobs import _rollouts_only  # noqa: E402

MAX_LENGTH = 16  # tokens: the longest document has 68, so up to 5 windows
METRICS = ("word_perplexity", "byte_perplexity", "bits_per_byte")


@pytest.fixture(scope="module")
def small_model():
    """(model, tokenizer, its Hugging Face folder): the repo's shipped SmolLM2-135M, loaded once."""
    from evalpipe.runners import local

    try:
        gguf = local.shipped_gguf()
    except ConfigError as exc:
        pytest.skip(str(exc))
    import torch

    model, tok = local.load(gguf)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the local runner runs it: lm-eval's models and the loopback server share the cores
    yield model, tok, str(local.hf_folder(gguf))
    torch.set_num_threads(threads)


def lm_eval_run(task_dir, lm, out_dir=None):
    """lm-eval's own `simple_evaluate` of tiny_ppl with `lm`: (results of the task, its samples), and with `out_dir`
    the files its EvaluationTracker writes: (results JSON, samples lines)."""
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.tasks import TaskManager

    tracker = EvaluationTracker(output_path=str(out_dir)) if out_dir else None
    out = simple_evaluate(model=lm, tasks=["tiny_ppl"], log_samples=True, evaluation_tracker=tracker,
                          task_manager=TaskManager(include_path=str(task_dir), include_defaults=False))
    if not out_dir:
        return out["results"]["tiny_ppl"], out["samples"]["tiny_ppl"]
    samples = out.pop("samples")
    tracker.save_results_aggregated(results=out, samples=samples)
    tracker.save_results_samples(task_name="tiny_ppl", samples=samples["tiny_ppl"])
    folder = Path(out_dir) / tracker.general_config_tracker.model_name_sanitized
    return json.loads(next(folder.glob("results_*.json")).read_text()), \
        [json.loads(x) for x in next(folder.glob("samples_*.jsonl")).read_text().splitlines()]


def rolling_instance(text, i=0):
    from lm_eval.api.instance import Instance

    return Instance("loglikelihood_rolling", {}, (text,), idx=i)


def test_perplexity_on_the_local_runner_agrees_with_lm_evals_hf_model(home, project_from, task_dir, small_model):
    from lm_eval.models.huggingface import HFLM

    model, tok, _ = small_model
    split = split_of(project_from, task_dir, "tiny_ppl")
    local = ModelConfig(key="smollm2-135m", runner="local", options={"max_length": MAX_LENGTH})
    _, rollouts, judgements, ours = run_here(split, local, home)
    assert (rollouts["status"] == "ok").all(), rollouts["error"].tolist()
    lls = {sid: json.loads(raw) for sid, raw in zip(rollouts["sample_id"], rollouts["raw_output"])}
    assert [len(v) for v in lls.values()] == [1] * 5  # one log-likelihood per document

    hflm = HFLM(pretrained=model, tokenizer=tok, batch_size=1, max_length=MAX_LENGTH)
    theirs, their_samples = lm_eval_run(task_dir, hflm)
    assert len(their_samples) == 5
    for s in their_samples:  # per document: the same sum over the same windows
        assert lls[str(s["doc_id"])][0] == pytest.approx(s["resps"][0][0], abs=1e-4)
    for metric in METRICS:  # lm-eval's weighted_perplexity / bits_per_byte over the same (loglikelihood, weight)
        assert ours[f"lm_eval_{metric},none"].value == pytest.approx(theirs[f"{metric},none"], rel=1e-6)
        assert ours[f"lm_eval_{metric},none"].n == 5
        assert bool(ours[f"lm_eval_{metric},none"].higher_is_better) is False
    by_sample = {sid: json.loads(d)["lm_eval"] for sid, d in zip(judgements["sample_id"], judgements["details"])}
    for s in their_samples:
        for metric in METRICS:
            mine = by_sample[str(s["doc_id"])][f"{metric},none"]
            assert mine[0] == pytest.approx(s[metric][0], abs=1e-4) and mine[1] == s[metric][1]
    # the judgement's score is the document's log-likelihood; row `lm_eval` their mean
    assert ours["lm_eval"].value == pytest.approx(sum(v[0] for v in lls.values()) / 5)

    # the windows really roll: with the model's own max length (8192) the long documents score otherwise
    longest = max(their_samples, key=lambda s: len(s["target"]))
    text = longest["target"]
    (whole,) = HFLM(pretrained=model, tokenizer=tok, batch_size=1).loglikelihood_rolling([rolling_instance(text)],
                                                                                         disable_tqdm=True)
    assert abs(whole - lls[str(longest["doc_id"])][0]) > 0.1


def endpoint_model(base_url, **options):
    return ModelConfig(key="served", runner="litellm", model="openai/mock", api_base=base_url,
                       params={"max_tokens": 8}, options=options)


def test_perplexity_on_an_endpoint_agrees_with_lm_evals_local_completions_and_exports_as_lm_eval(
        home, write_config, task_dir, tmp_path, monkeypatch, small_model):
    import evalpipe
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    from evalpipe.runners import build_runner
    from tests.helpers.cli import cli_in_process

    model, tok, folder = small_model
    with serve_in_thread(ModelLogprobsMock(model, tok)) as (mock, base_url):
        write_config(f"""
benchmarks:
  lm:
    adapter: lm_eval
    splits: {{tiny_ppl: {{}}}}
    options: {{task: tiny_ppl, include_path: "{task_dir}"}}
models:
  served:
    runner: litellm
    model: openai/mock
    api_base: {base_url}
    options: {{tokenizer: "{folder}", max_length: {MAX_LENGTH}}}
""")
        res = evalpipe.evaluate(benchmarks=["lm/tiny_ppl"], models=["served"])
        assert res.success, res.failures if hasattr(res, "failures") else res
        # lm-eval's payload: token-id prompts (the windows), echo, one logprob, one generated token, greedy
        body = mock.requests[0]
        assert {k: body[k] for k in ("echo", "logprobs", "max_tokens", "temperature")} == \
            {"echo": True, "logprobs": 1, "max_tokens": 1, "temperature": 0}
        windows = [p for r in mock.requests for p in r["prompt"]]
        assert all(isinstance(t, int) for p in windows for t in p) and max(len(p) for p in windows) == MAX_LENGTH - 1
        assert len(windows) > 5  # more windows than documents
        n_ours = len(mock.requests)
        lm = LocalCompletionsAPI(base_url=f"{base_url}/completions", model="mock", tokenizer_backend="huggingface",
                                 tokenizer=folder, max_length=MAX_LENGTH, max_retries=1)
        theirs, their_samples = lm_eval_run(task_dir, lm, tmp_path / "lm_eval_out")
        their_windows = [p for r in mock.requests[n_ours:] for p in
                         (r["prompt"] if isinstance(r["prompt"][0], list) else [r["prompt"]])]
        assert sorted(map(tuple, windows)) == sorted(map(tuple, their_windows))  # the very same windows

        # the endpoint's numbers are the local runner's with a max length two shorter (lm-eval's API models keep
        # one token for the generated one, and cut windows one token shorter than that)
        runner = build_runner(ModelConfig(key="l", runner="local", options={"max_length": MAX_LENGTH - 2}))
        texts = [s["target"] for s in their_samples]
        local_lls = runner.loglikelihood_rolling(texts)
    for s, ll in zip(their_samples, local_lls):  # (lm-eval's tracker writes the responses as text)
        assert float(s["resps"][0][0]) == pytest.approx(ll, abs=1e-4)

    x = cli_in_process(monkeypatch)("export", "--format", "lm-eval", "--split", "lm/tiny_ppl", "--model", "served",
                                    "--out", str(tmp_path / "out"))
    assert x.exit_code == 0, x.output
    results_file, samples_file = (Path(p) for p in x.output.split())
    ours = json.loads(results_file.read_text())
    got, want = ours["results"]["tiny_ppl"], theirs["results"]["tiny_ppl"]
    for metric in METRICS:
        assert got[f"{metric},none"] == pytest.approx(want[f"{metric},none"], rel=1e-12)
        assert got[f"{metric}_stderr,none"] == want[f"{metric}_stderr,none"] == "N/A"
    assert ours["higher_is_better"] == theirs["higher_is_better"]
    assert ours["n-samples"] == theirs["n-samples"]
    mine_cfg, their_cfg = ours["configs"]["tiny_ppl"], theirs["configs"]["tiny_ppl"]
    assert {k: (mine_cfg.get(k), their_cfg.get(k)) for k in {*mine_cfg, *their_cfg}
            if mine_cfg.get(k) != their_cfg.get(k)} == {}  # num_fewshot 0 included, as simple_evaluate sets it
    lines = [json.loads(line) for line in samples_file.read_text().splitlines()]
    keys = ("doc_id", "doc", "target", "arguments", "filter", "metrics", "doc_hash", "prompt_hash", "target_hash")
    assert [{k: s[k] for k in keys} for s in lines] == [{k: s[k] for k in keys} for s in their_samples]
    for mine, lm_s in zip(lines, their_samples):
        assert mine["resps"] == lm_s["resps"] and mine["filtered_resps"] == lm_s["filtered_resps"]
        for metric in METRICS:
            assert mine[metric] == lm_s[metric]


def test_an_endpoint_without_a_known_tokenizer_is_refused_in_one_line_before_any_model_call(project_from, task_dir,
                                                                                         tmp_path):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.runners import build_runner

    adapter = adapter_for(split_of(project_from, task_dir, "tiny_ppl"))
    for options in ({}, {"tokenizer": str(tmp_path / "no_such_tokenizer")}):
        with pytest.raises(ConfigError, match="tiny_ppl' is loglikelihood_rolling .*model 'served': .*set "
                                              "options.tokenizer") as info:
            adapter.check_runner(build_runner(endpoint_model("http://127.0.0.1:9/v1", **options)))
        assert "\n" not in str(info.value)


def test_a_runner_without_log_likelihoods_is_refused_and_so_is_vllm(project_from, task_dir, monkeypatch):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.runners import build_runner, local

    adapter = adapter_for(split_of(project_from, task_dir, "tiny_ppl"))
    with pytest.raises(ConfigError, match="runner 'echo' can't compute them"):
        adapter.check_runner(build_runner(ModelConfig(key="e", runner="echo")))
    runner = local.LocalRunner.__new__(local.LocalRunner)
    runner.engine, runner.model = "vllm", ModelConfig(key="v", runner="local")
    with pytest.raises(ConfigError, match="log-likelihoods need engine transformers, not vllm"):
        adapter.check_runner(runner)


def test_an_endpoint_without_prompt_logprobs_fails_each_sample_with_one_line(home, project_from, task_dir,
                                                                              small_model):
    model, tok, folder = small_model
    split = split_of(project_from, task_dir, "tiny_ppl")
    with serve_in_thread(ModelLogprobsMock(model, tok, logprobs=False)) as (_, base_url):
        _, rollouts, _, _ = _rollouts_only(split, endpoint_model(base_url, tokenizer=folder, max_length=MAX_LENGTH),
                                           home)
    (error,) = set(rollouts["error"])
    assert "\n" not in error and error.endswith("returned no prompt logprobs (echo: true, logprobs: 1); "
                                                "log-likelihood tasks need an endpoint that does (vLLM's OpenAI "
                                                "server), or runner: local")


def test_the_window_settings_are_in_the_runners_identity():
    """A changed max_length (or the endpoint's tokenizer) changes the windows, hence the numbers: a new rollout."""
    from evalpipe.runners import build_runner, local

    try:
        local.shipped_gguf()
    except ConfigError as exc:
        pytest.skip(str(exc))
    plain, windowed = (build_runner(ModelConfig(key="l", runner="local", options=o)).identity()
                       for o in ({}, {"max_length": 16}))
    assert "max_length" not in plain and windowed == {**plain, "max_length": 16}  # other fingerprints unchanged
    base = "http://127.0.0.1:9/v1"
    idents = [build_runner(endpoint_model(base, **o)).identity()
              for o in ({}, {"max_length": 16}, {"max_length": 16, "tokenizer": "org/tok"})]
    assert "rolling_windows" not in idents[0] and len({json.dumps(i, sort_keys=True) for i in idents}) == 3
