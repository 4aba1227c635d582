"""Prompt wrappers (.j2 JSON system/user, .tmpl flat text) and native chat-message datasets."""
import json

import pytest

from evalpipe.project import load_config
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.pipeline.prompt_wrappers import DEFAULT_SYSTEM, load_wrapper
from evalpipe.store.warehouse import Warehouse

J2 = '{"system": {{ system | tojson }}, "user": {{ ("Question: " ~ user ~ "\\nTools: " ~ (tools | length)) | tojson }}}\n'
TMPL = "[SYS] $system\n[USER] $user\n[TOOLS] $tools\n"
TOOLS = [{"type": "function", "function": {"name": "math.add", "description": "add", "parameters": {"type": "object"}}}]


def test_j2_renders_the_documented_system_and_user_turns(tmp_path):
    (tmp_path / "w.j2").write_text(J2)
    w = load_wrapper("w.j2", tmp_path)
    assert w.render("2+2?") == [{"role": "system", "content": DEFAULT_SYSTEM},
                                {"role": "user", "content": "Question: 2+2?\nTools: 0"}]
    # the sample's system message wins over the default; the configured one over the built-in default
    assert w.render("q", system="Be terse.", tools=TOOLS)[0] == {"role": "system", "content": "Be terse."}
    assert w.render("q", tools=TOOLS)[1]["content"].endswith("Tools: 1")
    w2 = load_wrapper({"path": "w.j2", "system": "You grade math."}, tmp_path)
    assert w2.render("q")[0]["content"] == "You grade math." and w2.sha256 != w.sha256


def test_tmpl_renders_one_flat_user_turn(tmp_path):
    (tmp_path / "w.tmpl").write_text(TMPL)
    w = load_wrapper("w.tmpl", tmp_path)
    (msg,) = w.render("2+2?", tools=TOOLS)
    assert msg["role"] == "user"
    assert msg["content"] == f"[SYS] {DEFAULT_SYSTEM}\n[USER] 2+2?\n[TOOLS] {json.dumps(TOOLS)}"
    assert w.render("x")[0]["content"].endswith("[TOOLS] ")


def test_bad_wrappers_are_one_line_errors(tmp_path):
    (tmp_path / "bad.j2").write_text("{{ user ")
    with pytest.raises(ConfigError, match="invalid Jinja2"):
        load_wrapper("bad.j2", tmp_path)
    (tmp_path / "notjson.j2").write_text("Q: {{ user }}")
    with pytest.raises(DataError, match="must render a JSON object"):
        load_wrapper("notjson.j2", tmp_path).render("x")
    with pytest.raises(ConfigError, match="must end in .j2"):
        load_wrapper("w.txt", tmp_path)
    with pytest.raises(ConfigError, match="not found"):
        load_wrapper("missing.tmpl", tmp_path)


CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {data}, limit: 3}}
    options:
      columns: {{prompt: question, target: answer, id: id}}
      {bench_wrapper}
    metrics: [exact_match]
models:
  parrot: {{runner: echo{model_wrapper}}}
"""


def test_changing_the_wrapper_changes_runner_fingerprint_and_reruns_rollouts(tmp_path, write_config, instance, home):
    from eval_assets.launch import evaluate
    from resources import ModelRunnerResource

    j2, tmpl = tmp_path / "w.j2", tmp_path / "w.tmpl"
    j2.write_text(J2)
    tmpl.write_text(TMPL)
    data = "{repo}/data/smoke/test.jsonl"
    write_config(CONFIG.format(data=data, bench_wrapper=f"prompt_wrapper: {j2}", model_wrapper=""))
    wh = Warehouse(home / "warehouse.duckdb")
    assert evaluate(load_config(), ["smoke/extra"], ["parrot"], instance=instance).success
    msgs = json.loads(wh.query("select messages from prompts where sample_id = 's1'")["messages"][0])
    assert msgs == [{"role": "system", "content": DEFAULT_SYSTEM},
                    {"role": "user", "content": "Question: What is the capital of France? Answer with one word.\nTools: 0"}]
    fp1 = wh.query("select * from fingerprints").iloc[0]
    assert fp1["prompt_wrapper_sha256"] == load_wrapper(str(j2), tmp_path).sha256

    # the same wrapper again: everything from the journal
    assert evaluate(load_config(), ["smoke/extra"], ["parrot"], instance=instance).success
    assert wh.query("select bool_and(cached) c from rollouts")["c"][0]

    # the model's wrapper (here via the run's runner options, i.e. --prompt-wrapper) wins over the benchmark's
    r = evaluate(load_config(), ["smoke/extra"], ["parrot"], instance=instance,
                 resources={"model_runner": ModelRunnerResource(options={"prompt_wrapper": str(tmpl)})})
    assert r.success
    msgs = json.loads(wh.query("select messages from prompts where sample_id = 's1'")["messages"][0])
    assert [m["role"] for m in msgs] == ["user"] and msgs[0]["content"].startswith("[SYS] ")
    fp2 = wh.query("select * from fingerprints").iloc[0]
    assert fp2["runner_fingerprint"] != fp1["runner_fingerprint"]
    assert fp2["prompt_wrapper_sha256"] == load_wrapper(str(tmpl), tmp_path).sha256
    roll = wh.query("select cached, prediction from rollouts order by sample_id")
    assert not roll["cached"].any()  # re-run, not taken from the journal
    assert roll["prediction"][0].startswith("[SYS] ")  # echo repeats the wrapped user turn

    # editing the wrapper file also re-runs
    tmpl.write_text(TMPL.replace("[USER]", "[Q]"))
    evaluate(load_config(), ["smoke/extra"], ["parrot"], instance=instance,
             resources={"model_runner": ModelRunnerResource(options={"prompt_wrapper": str(tmpl)})})
    assert not wh.query("select cached from rollouts")["cached"].any()
    assert wh.query("select * from fingerprints").iloc[0]["runner_fingerprint"] != fp2["runner_fingerprint"]


def test_openai_evals_style_chat_messages_run_natively(tmp_path, write_config, instance, home):
    from eval_assets.launch import evaluate

    rows = [
        {"input": [{"role": "system", "content": "Answer with one word."},
                   {"role": "user", "content": "Capital of France?"}], "ideal": "Paris"},
        {"input": [{"role": "system", "content": "Answer with a number."},
                   {"role": "user", "content": "2 + 3?"}, {"role": "assistant", "content": "5"},
                   {"role": "user", "content": "And 2 + 4?"}], "ideal": "6"},
    ]
    data = tmp_path / "oa.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {data}}}
    options:
      columns: {{messages: input, target: ideal}}
    metrics: [exact_match]
models:
  perfect: {{runner: echo, reply: target}}
""")
    assert evaluate(load_config(), ["smoke/extra"], ["perfect"], instance=instance).success
    wh = Warehouse(home / "warehouse.duckdb")
    got = [json.loads(m) for m in wh.query("select messages from prompts order by sample_index")["messages"]]
    assert got == [r["input"] for r in rows]  # sent as they are: roles and turns kept
    assert wh.query("select value from metrics where slice = 'all'")["value"][0] == 1.0

    # a prompt column holding chat messages is not silently JSON-encoded into one user turn
    write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits:
      extra: {{path: {data}}}
    options:
      columns: {{prompt: input, target: ideal}}
models:
  perfect: {{runner: echo, reply: target}}
""")
    from evalpipe.benchmarks import adapter_for

    with pytest.raises(DataError, match=r"holds chat messages; map it with columns: \{messages: input\}"):
        list(adapter_for(load_config().split("smoke/extra")).load())
