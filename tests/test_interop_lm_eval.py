"""lm-evaluation-harness tasks (issue 23): `adapter: lm_eval` prompts with lm-eval's TaskManager and scores with the
task's own process_results and aggregation; the same model outputs scored by lm_eval.evaluator.evaluate give the
same numbers. The tasks are local YAMLs over JSONL data shipped in tests/data/lm_eval_task (no network)."""
import json
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")

from evalpipe.core.config import ModelConfig  # noqa: E402
from evalpipe.core.errors import ConfigError  # noqa: E402

DATA = Path(__file__).parent / "data" / "lm_eval_task"

# Recorded answers of a model to tiny_qa's six questions (doc ids 0-5): right, right after lm-eval's `until` cut and
# normalization (ignore_case, ignore_punctuation), wrong, and an empty answer.
QA_OUTPUTS = {"0": "Paris\nQuestion: and Spain?", "1": "5", "2": "Blue.", "3": "six", "4": "cold", "5": ""}


@pytest.fixture
def task_dir(tmp_path):
    """The task YAMLs with their data paths made absolute (lm-eval resolves data_files from the working directory)."""
    out = tmp_path / "tasks"
    out.mkdir()
    for f in DATA.glob("*.jsonl"):
        (out / f.name).write_bytes(f.read_bytes())
    for f in DATA.glob("*.yaml"):
        (out / f.name).write_text(f.read_text().replace("DATA_DIR", str(out)))
    return out


def lm_eval_own_results(task_dir, task, answers, apply_chat_template=False):
    """lm-eval's own run of `task` over a model that answers with `answers(request)`: (results, samples)."""
    from lm_eval.api.model import LM
    from lm_eval.evaluator import evaluate
    from lm_eval.tasks import TaskManager, get_task_dict

    class Recorded(LM):
        def loglikelihood(self, requests):
            return [answers(r) for r in requests]

        def generate_until(self, requests):
            return [answers(r) for r in requests]

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            return json.dumps(chat_history)

        @property
        def tokenizer_name(self):
            return "recorded"

    tasks = get_task_dict([task], TaskManager(include_path=str(task_dir), include_defaults=False))
    tasks[task].set_fewshot_seed(seed=1234)  # as lm_eval.simple_evaluate does
    out = evaluate(Recorded(), tasks, apply_chat_template=apply_chat_template, log_samples=True)
    return out["results"][task], out["samples"][task]


def split_of(project_from, task_dir, task, **options):
    project = project_from({"benchmarks": {"lm": {"adapter": "lm_eval", "splits": {task: {}},
                                                  "options": {"task": task, "include_path": str(task_dir),
                                                              **options}}},
                            "models": {"m": {"runner": "echo"}}})
    return project.config.split(f"lm/{task}")


def run_here(split, model, home):
    from evalpipe.pipeline import stages
    from evalpipe.runners import build_runner, run_settings_for

    prompts = stages.build_prompts(split, model.key, stages.build_dataset(split))
    rollouts = stages.run_rollouts(split, model, prompts, build_runner(model), run_settings_for(model),
                                   journal_file=home / "j.sqlite")
    judgements = stages.judge(split, prompts, rollouts)
    metrics = stages.compute_metrics(split.key, model.key, judgements, split=split)
    return prompts, rollouts, judgements, {r.metric: r for r in metrics.itertuples() if r.slice == "all"}


def test_generate_until_task_scores_as_lm_eval_scores_it(home, project_from, task_dir):
    split = split_of(project_from, task_dir, "tiny_qa", slice_by=["answer"], fewshot_as_multiturn=False)
    script = [{"sample_id": sid, "turns": [{"content": text}]} for sid, text in QA_OUTPUTS.items()]
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": script})
    prompts, _, judgements, ours = run_here(split, model, home)

    # lm-eval's chat path built the messages: the description as the system turn, two seeded few-shot examples
    first = json.loads(prompts["messages"].iloc[0])
    assert first[0] == {"role": "system", "content": "Answer each question with one word.\n\n"}
    assert first[1]["content"].count("Question:") == 3 and first[1]["content"].endswith(
        "Question: What is the capital of France?\nAnswer:")

    def answers(request):  # the same outputs, cut at the request's `until` as lm-eval's HF model does
        text = QA_OUTPUTS[str(request.doc_id)]
        return text.split("\n")[0]

    theirs, their_samples = lm_eval_own_results(task_dir, "tiny_qa", answers, apply_chat_template=True)
    # the prompts are lm-eval's own, few-shot draws included
    assert [json.loads(s["arguments"][0][0]) for s in their_samples] == \
        [json.loads(m) for m in prompts["messages"]]
    assert theirs["exact_match,none"] == pytest.approx(4 / 6)
    row = ours["lm_eval_exact_match,none"]
    assert row.value == pytest.approx(theirs["exact_match,none"])
    assert row.stderr == pytest.approx(theirs["exact_match_stderr,none"])
    assert 0 < row.ci_low < row.value < row.ci_high < 1  # our Wilson interval kept for a right/wrong mean
    assert bool(row.higher_is_better) is True
    per_sample = dict(zip(judgements["sample_id"], judgements["score"]))
    assert per_sample == {str(s["doc_id"]): s["exact_match"] for s in their_samples}
    assert ours["lm_eval"].value == pytest.approx(4 / 6)  # the first metric, per-sample mean
    assert set(json.loads(judgements["slices"].iloc[0])) == {"answer"}  # slice_by reads the doc's fields


def test_loglikelihood_task_is_refused_before_any_model_call_on_a_runner_without_logprobs(home, project_from,
                                                                                          task_dir):
    from evalpipe.pipeline import stages
    from evalpipe.runners import build_runner, run_settings_for

    split = split_of(project_from, task_dir, "tiny_mc")
    model = ModelConfig(key="m", runner="echo")
    prompts = stages.build_prompts(split, model.key, stages.build_dataset(split))
    runner, calls = build_runner(model), []

    async def generate(request):  # a spy: no model call may happen
        calls.append(request.sample_id)

    runner.generate = generate
    with pytest.raises(ConfigError, match="multiple_choice .* runner 'echo' can't compute them: use runner: local"):
        stages.run_rollouts(split, model, prompts, runner, run_settings_for(model), journal_file=home / "j.sqlite")
    assert calls == []


def test_unknown_task_and_missing_task_say_how_to_fix(project_from, task_dir):
    from evalpipe.benchmarks import adapter_for

    with pytest.raises(ConfigError, match="task 'nope' not found under .*; check `task:`"):
        adapter_for(split_of(project_from, task_dir, "nope")).load()


@pytest.mark.slow
def test_multiple_choice_task_on_the_local_model_scores_as_lm_eval_scores_it(home, project_from, task_dir):
    from evalpipe.runners import local

    try:
        local.shipped_gguf()
    except ConfigError as exc:
        pytest.skip(str(exc))

    split = split_of(project_from, task_dir, "tiny_mc")
    model = ModelConfig(key="smollm2-135m", runner="local")
    prompts, rollouts, judgements, ours = run_here(split, model, home)
    assert (rollouts["status"] == "ok").all(), rollouts["error"].tolist()
    recorded = {sid: json.loads(raw) for sid, raw in zip(rollouts["sample_id"], rollouts["raw_output"])}
    assert [len(v) for v in recorded.values()] == [3, 3, 3, 3]  # one (loglikelihood, is_greedy) per choice

    # our log-likelihoods are those lm-eval's own HF model computes for the same requests
    from lm_eval.models.huggingface import HFLM

    hf_model, tok = local.load(local.shipped_gguf())
    hflm = HFLM(pretrained=hf_model, tokenizer=tok, batch_size=1)

    def answers(request):
        return tuple(recorded[str(request.doc_id)][request.idx])

    theirs, their_samples = lm_eval_own_results(task_dir, "tiny_mc", answers)
    from lm_eval.api.instance import Instance

    requests = [Instance("loglikelihood", s["doc"], tuple(a), idx=i, metadata=("tiny_mc", s["doc_id"], 1))
                for s in their_samples for i, a in enumerate(s["arguments"])]
    for (ll, greedy), (hf_ll, hf_greedy) in zip((answers(r) for r in requests), hflm.loglikelihood(requests)):
        assert ll == pytest.approx(hf_ll, abs=1e-3) and greedy == hf_greedy

    for metric in ("acc", "acc_norm"):
        row = ours[f"lm_eval_{metric},none"]
        assert row.value == pytest.approx(theirs[f"{metric},none"]) and row.n == 4
        assert row.stderr == pytest.approx(theirs[f"{metric}_stderr,none"])
    by_sample = {sid: json.loads(d)["lm_eval"] for sid, d in zip(judgements["sample_id"], judgements["details"])}
    assert by_sample == {str(s["doc_id"]): {"acc,none": s["acc"], "acc_norm,none": s["acc_norm"]}
                         for s in their_samples}


def test_export_writes_lm_eval_results_json_and_samples_jsonl(home, write_config, task_dir, tmp_path, monkeypatch):
    import evalpipe
    from tests.helpers.cli import cli_in_process

    script = tmp_path / "answers.jsonl"
    script.write_text("".join(json.dumps({"sample_id": sid, "turns": [{"content": text}]}) + "\n"
                              for sid, text in QA_OUTPUTS.items()))
    write_config(f"""
benchmarks:
  lm:
    adapter: lm_eval
    splits: {{tiny_qa: {{}}}}
    options: {{task: tiny_qa, include_path: "{task_dir}", fewshot_as_multiturn: false}}
models:
  scripted: {{runner: echo, reply: script, script: "{script}"}}
""")
    res = evalpipe.evaluate(benchmarks=["lm/tiny_qa"], models=["scripted"])
    assert res.success, res.failures if hasattr(res, "failures") else res
    x = cli_in_process(monkeypatch)("export", "--format", "lm-eval", "--split", "lm/tiny_qa", "--model", "scripted",
                                    "--out", str(tmp_path / "out"))
    assert x.exit_code == 0, x.output
    results_file, samples_file = (Path(p) for p in x.output.split())
    assert results_file.name.startswith("results_") and samples_file.name.startswith("samples_tiny_qa_")
    assert results_file.parent == tmp_path / "out" / "scripted"

    theirs, their_samples = lm_eval_own_results(task_dir, "tiny_qa", lambda r: QA_OUTPUTS[str(r.doc_id)].split("\n")[0],
                                                apply_chat_template=True)
    ours = json.loads(results_file.read_text())
    got = ours["results"]["tiny_qa"]
    assert got["exact_match,none"] == pytest.approx(theirs["exact_match,none"])
    assert got["exact_match_stderr,none"] == pytest.approx(theirs["exact_match_stderr,none"])
    assert ours["higher_is_better"] == {"tiny_qa": {"exact_match": True}}
    assert ours["versions"] == {"tiny_qa": 1.0} and ours["n-shot"] == {"tiny_qa": 2}
    assert ours["n-samples"] == {"tiny_qa": {"original": 6, "effective": 6}}
    assert ours["configs"]["tiny_qa"]["doc_to_text"] == "Question: {{question}}\nAnswer:"

    lines = [json.loads(line) for line in samples_file.read_text().splitlines()]
    assert [s["doc_id"] for s in lines] == list(range(6))
    first = lines[0]
    assert first["doc"] == {"question": "What is the capital of France?", "answer": "Paris"}
    assert first["target"] == "Paris" and first["resps"] == [["Paris"]] and first["filtered_resps"] == ["Paris"]
    assert first["exact_match"] == 1.0 and first["filter"] == "none" and first["metrics"] == ["exact_match"]
    assert set(first["arguments"]) == {"gen_args_0"} and set(first["arguments"]["gen_args_0"]) == {"arg_0", "arg_1"}
    for mine, lm in zip(lines, their_samples):  # the same prompts and hashes as lm-eval logs them
        assert (mine["prompt_hash"], mine["doc_hash"], mine["target_hash"], mine["exact_match"]) == \
            (lm["prompt_hash"], lm["doc_hash"], lm["target_hash"], lm["exact_match"])


def test_source_version_follows_the_task_yaml_and_its_data_files(project_from, task_dir):
    from evalpipe.benchmarks import adapter_for

    adapter = adapter_for(split_of(project_from, task_dir, "tiny_qa"))
    before = adapter.source_version()
    assert before == adapter.source_version() and str(task_dir / "qa_fewshot.jsonl") in before
    with open(task_dir / "qa.jsonl", "a") as fh:
        fh.write('{"question": "One more?", "answer": "yes"}\n')
    assert adapter.source_version() != before  # the dataset is loaded again when the data changes


def test_loglikelihood_task_is_refused_on_the_local_runner_with_the_vllm_engine(project_from, task_dir, monkeypatch):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.runners import local

    runner = local.LocalRunner.__new__(local.LocalRunner)  # no checkpoint or engine needed to be asked
    runner.engine, runner.model = "vllm", ModelConfig(key="v", runner="local")
    with pytest.raises(ConfigError, match="tiny_mc' is multiple_choice: model 'v': log-likelihoods need engine "
                                          "transformers, not vllm"):
        adapter_for(split_of(project_from, task_dir, "tiny_mc")).check_runner(runner)


def test_a_changed_choice_changes_the_prompt_fingerprint(project_from, task_dir):
    from evalpipe.pipeline import stages

    def fingerprints():
        split = split_of(project_from, task_dir, "tiny_mc")
        return stages.build_prompts(split, "m", stages.build_dataset(split))["prompt_fingerprint"].tolist()

    before = fingerprints()
    rows = (task_dir / "mc.jsonl").read_text().replace('"green"', '"grey"')
    (task_dir / "mc.jsonl").write_text(rows)
    from evalpipe.metrics.lm_eval_scoring import load_task

    load_task.cache_clear()  # a new process would load the task afresh
    after = fingerprints()
    assert after[0] != before[0] and after[1:] == before[1:]  # the same context, another continuation


def test_the_metric_fingerprint_follows_the_task_yaml(task_dir):
    from evalpipe.metrics import build_metric

    spec = {"name": "lm_eval", "task": "tiny_qa", "include_path": str(task_dir)}
    before = build_metric(spec).identity()
    yaml_file = task_dir / "tiny_qa.yaml"
    yaml_file.write_text(yaml_file.read_text().replace("ignore_case: true", "ignore_case: false"))
    assert build_metric(spec).identity() != before


def test_every_filter_of_the_task_is_scored_as_lm_eval_scores_it(home, project_from, task_dir):
    split = split_of(project_from, task_dir, "tiny_qa_filters", fewshot_as_multiturn=False)
    outputs = {**QA_OUTPUTS, "4": "cold, I think"}  # right by its first word only
    script = [{"sample_id": sid, "turns": [{"content": text}]} for sid, text in outputs.items()]
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": script})
    _, _, judgements, ours = run_here(split, model, home)
    theirs, their_samples = lm_eval_own_results(
        task_dir, "tiny_qa_filters", lambda r: outputs[str(r.doc_id)].split("\n")[0], apply_chat_template=True)
    for key in ("exact_match,first_word", "exact_match,whole"):
        assert ours[f"lm_eval_{key}"].value == pytest.approx(theirs[key])
    assert theirs["exact_match,first_word"] != theirs["exact_match,whole"]  # the filters matter here
    details = {sid: json.loads(d)["lm_eval"] for sid, d in zip(judgements["sample_id"], judgements["details"])}
    for s in their_samples:
        assert details[str(s["doc_id"])][f"exact_match,{s['filter']}"] == s["exact_match"]


def lm_eval_with_its_defaults(task_dir, task, answers, out_dir):
    """lm-eval's own `simple_evaluate` with its defaults for a chat model (`--apply_chat_template`, hence
    fewshot_as_multiturn=True, as lm_eval's EvaluationConfig sets it), over a chat-API model that renders the chat
    as lm-eval's API models do (JsonChatStr), its files written by its EvaluationTracker: (results JSON, samples)."""
    from lm_eval.api.model import LM
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.loggers import EvaluationTracker
    from lm_eval.models.api_models import JsonChatStr
    from lm_eval.tasks import TaskManager

    class ChatApi(LM):
        def loglikelihood(self, requests):
            raise NotImplementedError

        def generate_until(self, requests):
            return [answers(r) for r in requests]

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError

        def apply_chat_template(self, chat_history, add_generation_prompt=True):
            return JsonChatStr(json.dumps(chat_history, ensure_ascii=False))

        def chat_template(self, chat_template=False):
            return ""

        @property
        def tokenizer_name(self):
            return "chat-api"

    tracker = EvaluationTracker(output_path=str(out_dir))
    out = simple_evaluate(model=ChatApi(), model_args="model=scripted", tasks=[task],
                          task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),
                          apply_chat_template=True, fewshot_as_multiturn=True, evaluation_tracker=tracker,
                          log_samples=True)
    samples = out.pop("samples")
    tracker.save_results_aggregated(results=out, samples=samples)
    tracker.save_results_samples(task_name=task, samples=samples[task])
    folder = Path(out_dir) / tracker.general_config_tracker.model_name_sanitized
    results_file = next(folder.glob("results_*.json"))
    return json.loads(results_file.read_text()), [json.loads(x) for x in
                                                  next(folder.glob("samples_*.jsonl")).read_text().splitlines()]


def test_defaults_are_lm_evals_and_the_export_is_complete(home, write_config, task_dir, tmp_path, monkeypatch):
    """With each tool's defaults (ours: none set; lm-eval's: a chat model, --apply_chat_template) the prompts,
    per-sample scores, aggregates, every key of the results JSON and the task hashes agree."""
    import evalpipe
    from tests.helpers.cli import cli_in_process

    script = tmp_path / "answers.jsonl"
    script.write_text("".join(json.dumps({"sample_id": sid, "turns": [{"content": text}]}) + "\n"
                              for sid, text in QA_OUTPUTS.items()))
    write_config(f"""
benchmarks:
  lm:
    adapter: lm_eval
    splits: {{tiny_qa: {{}}}}
    options: {{task: tiny_qa, include_path: "{task_dir}"}}
models:
  scripted: {{runner: echo, reply: script, script: "{script}"}}
""")
    res = evalpipe.evaluate(benchmarks=["lm/tiny_qa"], models=["scripted"])
    assert res.success
    x = cli_in_process(monkeypatch)("export", "--format", "lm-eval", "--split", "lm/tiny_qa", "--model", "scripted",
                                    "--out", str(tmp_path / "out"))
    assert x.exit_code == 0, x.output
    results_file, samples_file = (Path(p) for p in x.output.split())
    ours = json.loads(results_file.read_text())
    mine = [json.loads(line) for line in samples_file.read_text().splitlines()]
    theirs, their_samples = lm_eval_with_its_defaults(
        task_dir, "tiny_qa", lambda r: QA_OUTPUTS[str(r.doc_id)].split("\n")[0], tmp_path / "theirs")

    # multi-turn few-shot: the two examples are user/assistant turns before the question, as lm-eval builds them
    first = json.loads(their_samples[0]["arguments"]["gen_args_0"]["arg_0"][0])
    assert [m["role"] for m in first] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert mine[0]["arguments"] == their_samples[0]["arguments"]  # the chat as lm-eval writes it, gen_kwargs too
    assert ours["task_hashes"] == theirs["task_hashes"]
    for a, b in zip(mine, their_samples):
        assert (a["prompt_hash"], a["doc_hash"], a["exact_match"], a["resps"]) == \
            (b["prompt_hash"], b["doc_hash"], b["exact_match"], b["resps"])
    assert ours["results"]["tiny_qa"]["exact_match,none"] == pytest.approx(theirs["results"]["tiny_qa"]["exact_match,none"])
    assert set(theirs) - set(ours) == set()  # every key lm-eval writes
    assert set(theirs["config"]) - set(ours["config"]) == set()
    assert ours["fewshot_as_multiturn"] is True and ours["chat_template"] == theirs["chat_template"]
    assert ours["lm_eval_version"] == theirs["lm_eval_version"] and ours["config"]["fewshot_seed"] == 1234
    assert isinstance(ours["date"], float) and ours["config"]["model"] == "scripted"


def test_fewshot_as_multiturn_without_a_chat_template_is_refused_as_lm_eval_refuses_it(project_from, task_dir):
    from evalpipe.benchmarks import adapter_for

    with pytest.raises(ConfigError, match="fewshot_as_multiturn: true needs apply_chat_template: true"):
        adapter_for(split_of(project_from, task_dir, "tiny_qa", apply_chat_template=False,
                             fewshot_as_multiturn=True)).load()
    # lm-eval's default without a chat template: few-shot in one plain text turn
    samples = list(adapter_for(split_of(project_from, task_dir, "tiny_qa", apply_chat_template=False)).load())
    assert len(samples[0].messages) == 1 and samples[0].messages[0]["content"].count("Question:") == 3


@pytest.mark.parametrize("fast_path", [True, pytest.param(False, marks=pytest.mark.slow)])  # litellm's import: slow
def test_the_tasks_generation_settings_are_sent_with_each_request(home, project_from, task_dir, fast_path):
    """lm-eval's API chat models send the task's generation_kwargs with each request (max_gen_toks as max_tokens,
    temperature, `until` as stop, seed 1234): so do our runners, over the model's own params, on the wire."""
    from benchmarks.mock_server import MockLLM, serve_in_thread
    from evalpipe.benchmarks.lm_eval_task import request_params

    split = split_of(project_from, task_dir, "tiny_qa")
    with serve_in_thread(MockLLM()) as (mock, url):
        model = ModelConfig(key="api", runner="litellm", model="openai/mock", api_base=url,
                            params={"max_tokens": 8, "temperature": 0.7, "top_p": 0.5},
                            options={"fast_path": fast_path})
        _, rollouts, _, _ = run_here(split, model, home)
    assert (rollouts["status"] == "ok").all(), rollouts["error"].tolist()
    assert len(mock.bodies) == 6
    for body in mock.bodies:
        assert {k: body.get(k) for k in ("max_tokens", "temperature", "stop", "seed", "top_p")} == \
            {"max_tokens": 256, "temperature": 0, "stop": ["\n"], "seed": 1234, "top_p": 0.5}
    # what lm-eval's own API chat model puts in its payload for this task
    from lm_eval.models.openai_completions import LocalChatCompletion

    lm = LocalChatCompletion(base_url=f"{url}/chat/completions", model="mock", tokenizer_backend=None)
    theirs = lm._create_payload([{"role": "user", "content": "q"}], generate=True,
                                gen_kwargs={"until": ["\n"], "do_sample": False}, seed=lm._seed)
    assert {k: theirs[k] for k in ("max_tokens", "temperature", "stop", "seed")} == request_params(
        {"until": ["\n"], "do_sample": False})


def test_a_changed_generation_setting_is_a_new_rollout(project_from, task_dir, tmp_path):
    from evalpipe.metrics.lm_eval_scoring import load_task
    from evalpipe.pipeline import stages
    from evalpipe.runners import build_runner

    fps = []
    for n in (256, 16):
        load_task.cache_clear()  # loaded once per process
        (task_dir / "tiny_qa.yaml").write_text((task_dir / "tiny_qa.yaml").read_text().replace(
            "  do_sample: false", f"  do_sample: false\n  max_gen_toks: {n}").replace("  max_gen_toks: 256\n", ""))
        split = split_of(project_from, task_dir, "tiny_qa")
        prompts = stages.build_prompts(split, "api", stages.build_dataset(split))
        runner = build_runner(ModelConfig(key="api", runner="litellm", model="openai/m", api_base="http://127.0.0.1:9/v1"))
        requests = stages.rollout_requests(runner, prompts)
        assert requests[0].params["max_tokens"] == n
        fps.append(requests[0].fingerprint)
    assert fps[0] != fps[1]


def test_a_runner_that_cannot_take_the_settings_is_refused_in_one_line(project_from, task_dir):
    from evalpipe.benchmarks import adapter_for
    from evalpipe.runners import build_runner

    adapter = adapter_for(split_of(project_from, task_dir, "tiny_qa"))
    for runner in (build_runner(ModelConfig(key="api", runner="litellm", model="openai/gpt-4o-mini",
                                            api_base="http://127.0.0.1:9/v1")),
                   build_runner(ModelConfig(key="s", runner="echo"))):  # echo generates nothing: ignores them
        adapter.check_runner(runner)
    batched = build_runner(ModelConfig(key="small", runner="local", options={"batch_size": 4}))
    with pytest.raises(ConfigError) as err:
        adapter.check_runner(batched)
    assert "\n" not in str(err.value) and "(batch_size 4) decodes every request with its own params: set params: " \
        '{"max_tokens": 256, "temperature": 0, "stop": ["\\n"], "seed": 1234} on it' in str(err.value)


def test_the_local_runner_decodes_a_request_with_its_own_settings():
    from evalpipe.runners import build_runner

    runner = build_runner(ModelConfig(key="small", runner="local", params={"max_tokens": 8, "repetition_penalty": 1.1}))
    tok = object()
    d = runner.decoding_for({"max_tokens": 256, "temperature": 0, "stop": ["\n"], "seed": 1234})
    assert runner._decode_kwargs(tok, d) == {"max_new_tokens": 256, "repetition_penalty": 1.1, "do_sample": False,
                                             "temperature": None, "top_p": None, "top_k": None,
                                             "stop_strings": ["\n"], "tokenizer": tok}
    assert d.seed == 1234 and runner._decode_kwargs(tok)["max_new_tokens"] == 8


GROUP_YAML = """group: tiny_group
task: [tiny_qa, tiny_mc]
aggregate_metric_list:
  - metric: acc
    weight_by_size: true
metadata:
  version: 1.0
"""


def test_a_task_group_by_name_is_aggregated_as_lm_eval_aggregates_it(home, project_from, task_dir):
    """`tasks: [tiny_group, tiny_qa_filters]`: lm-eval names (a group and a task) resolved by its TaskManager under
    include_path; per task rows and the group's row by lm-eval's own Group.aggregate, as lm_eval.evaluate gives."""
    (task_dir / "grp.yaml").write_text(GROUP_YAML.replace("tiny_mc]", "tiny_mc, tiny_qa_filters]").replace(
        "metric: acc\n", "metric: exact_match\n"))
    split = split_of(project_from, task_dir, "tiny_group", fewshot_as_multiturn=False, apply_chat_template=False)
    split.options.pop("task", None)
    split.options["tasks"] = "tiny_group"
    script = [{"sample_id": f"{t}/{sid}", "turns": [{"content": text}]}
              for t in ("tiny_qa", "tiny_qa_filters") for sid, text in QA_OUTPUTS.items()]
    script += [{"sample_id": f"tiny_mc/{i}", "turns": [{"content": "[[-1.0, true], [-2.0, false]]"}]}
               for i in range(10)]
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": script})
    from evalpipe.benchmarks.lm_eval_task import LmEvalAdapter

    adapter = LmEvalAdapter(split)
    assert set(adapter.leaves()) == {"tiny_qa", "tiny_mc", "tiny_qa_filters"}


def test_group_rows_agree_with_lm_evals_own_run(home, project_from, task_dir):
    (task_dir / "grp.yaml").write_text(GROUP_YAML.replace("tiny_mc]", "tiny_qa_filters]").replace(
        "metric: acc\n", "metric: exact_match\n"))
    split = split_of(project_from, task_dir, "tiny_group", fewshot_as_multiturn=False, apply_chat_template=False)
    script = [{"sample_id": f"{t}/{sid}", "turns": [{"content": text}]}
              for t in ("tiny_qa", "tiny_qa_filters") for sid, text in QA_OUTPUTS.items()]
    model = ModelConfig(key="scripted", runner="echo", options={"reply": "script", "script": script})
    _, _, judgements, ours = run_here(split, model, home)
    assert len(judgements) == 12

    from lm_eval.api.model import LM
    from lm_eval.evaluator import evaluate
    from lm_eval.tasks import TaskManager, get_task_dict

    class Recorded(LM):
        def generate_until(self, requests):
            return [QA_OUTPUTS[str(r.doc_id)].split("\n")[0] for r in requests]

        def loglikelihood(self, requests):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError

    tasks = get_task_dict(["tiny_group"], TaskManager(include_path=str(task_dir), include_defaults=False))
    out = evaluate(Recorded(), tasks, log_samples=False)
    theirs = out["results"]["tiny_group"]
    row = ours["lm_eval_tiny_group/exact_match,none"]
    assert row.value == pytest.approx(theirs["exact_match,none"])
    assert row.stderr == pytest.approx(theirs["exact_match_stderr,none"])
    assert ours["lm_eval_tiny_qa/exact_match,none"].value == pytest.approx(out["results"]["tiny_qa"]["exact_match,none"])


@pytest.mark.parametrize("config_shots, option_shots, expected_shots", [(0, 2, 0), (2, 1, 1), (2, None, 2)])
def test_num_fewshot_follows_lm_evals_rule(project_from, task_dir, config_shots, option_shots, expected_shots):
    """lm-eval's simple_evaluate overrides a task's `num_fewshot` with its argument unless the task's config sets 0:
    then the argument is ignored (a zero-shot task stays zero-shot). The prompts here are lm-eval's own."""
    from lm_eval.api.model import LM
    from lm_eval.evaluator import simple_evaluate
    from lm_eval.tasks import TaskManager

    task = f"tiny_qa_{config_shots}shot"
    (task_dir / f"{task}.yaml").write_text((task_dir / "tiny_qa.yaml").read_text()
                                           .replace("task: tiny_qa", f"task: {task}")
                                           .replace("num_fewshot: 2", f"num_fewshot: {config_shots}"))
    options = {} if option_shots is None else {"num_fewshot": option_shots}
    split = split_of(project_from, task_dir, task, apply_chat_template=False, **options)
    from evalpipe.pipeline import stages

    prompts = stages.build_prompts(split, "m", stages.build_dataset(split))

    class Recorded(LM):
        def generate_until(self, requests):
            return ["" for _ in requests]

        def loglikelihood(self, requests):
            raise NotImplementedError

        def loglikelihood_rolling(self, requests):
            raise NotImplementedError

    out = simple_evaluate(model=Recorded(), tasks=[task], num_fewshot=option_shots, log_samples=True,
                          task_manager=TaskManager(include_path=str(task_dir), include_defaults=False))
    theirs = [s["arguments"][0][0] for s in out["samples"][task]]
    ours = [json.loads(m)[-1]["content"] for m in prompts["messages"]]
    assert theirs[0].count("Question:") == expected_shots + 1
    assert [t.removeprefix("Answer each question with one word.\n\n") for t in theirs] == \
        [o.removeprefix("Answer each question with one word.\n\n") for o in ours]
