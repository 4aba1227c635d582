"""Secrets never land anywhere: unit rules, then secrets planted in env vars, the config, the prompts and the
model outputs of a real CLI run, searched for in every file under DAGSTER_HOME (Parquet read back as text)."""
import json
import logging
import os
import time

import pytest
from click.testing import CliRunner

from evalpipe.core.redact import MASK, Redactor, is_secret_name
from evalpipe.runners import register_runner
from evalpipe.runners.base import Runner
from evalpipe.core.types import Generation
from tests.helpers.cli import restore_cli_env
from tests.helpers.secrets import all_text, found


# ---- the rules ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("text", [
    "key sk-proj-abcdefghijklmnop1234", "hf_abcdefghijklmnopqrstuv", "jina_abcdefghijklmnop1234",
    "pplx-abcdefghijklmnop1234", "AIzaSyA-abcdefghijklmnopqrstu", "Authorization: Bearer abc.def.ghi-jkl",
    '{"api_key": "zzzzzzzz"}', "https://x/?access_token=abcd1234&y=1", "password=hunter22"])
def test_token_shapes_and_pairs_are_masked(text):
    out = Redactor().redact(text)
    assert MASK in out
    for secret in ("abcdefghijklmnop", "zzzzzzzz", "abcd1234", "hunter22", "abc.def"):
        assert secret not in out


@pytest.mark.parametrize("text", [
    'api_key = "zzzzzzzz"', '{"client_secret": "zzzzzzzz", "n": 1}', 'password=hunter22"', "password=hunter22\\",
    'see https://h/x?key=abcd1234" ok', 'Authorization: Bearer abc.def"', 'secret="hunter22" and "x"'])
def test_pairs_inside_stored_json_text_are_masked_and_the_json_stays_valid(text):
    """Messages, metadata and events are stored as JSON text and redacted as text: there a pair's quotes are
    escaped (`api_key = \\"...\\"`), and masking must never eat the backslash of an escaped quote."""
    stored = Redactor().redact(json.dumps([{"role": "user", "content": text}]))
    content = json.loads(stored)[0]["content"]  # still valid JSON
    assert MASK in content
    for secret in ("zzzzzzzz", "abcd1234", "hunter22", "abc.def"):
        assert secret not in stored


@pytest.mark.parametrize("text", [
    "sk-learn is a library", "max_tokens: 256", '{"prompt_tokens": 12, "total_tokens": 20}', "api_key_env: OPENAI_API_KEY",
    "The capital of France is Paris.", "hf_hub"])
def test_ordinary_text_is_left_alone(text):
    assert Redactor().redact(text) == text


def test_key_names():
    for n in ("api_key", "OPENAI_API_KEY", "password", "Authorization", "hf_token", "x-api-key", "client_secret"):
        assert is_secret_name(n), n
    for n in ("key", "partition_key", "max_tokens", "input_tokens", "api_key_env", "keywords", "tokenizer"):
        assert not is_secret_name(n), n
    r = Redactor()
    assert r.redact_obj({"headers": {"Authorization": "xyz"}, "max_tokens": 5, "api_key_env": "OPENAI_API_KEY",
                         "nested": [{"password": 1234}]}) == {
        "headers": {"Authorization": MASK}, "max_tokens": 5, "api_key_env": "OPENAI_API_KEY", "nested": [{"password": MASK}]}


def test_env_values_config_and_cli_patterns(write_config, monkeypatch):
    from evalpipe.core.redact import add_patterns, redact
    from evalpipe.project.redaction import install_redaction

    install_redaction()  # what every entry point does: the config file of the environment, followed as it changes
    monkeypatch.setenv("EVALS_REDACT_PATTERNS", "")  # restored (unset) after the test
    monkeypatch.setenv("ACME_CREDS", "plain-looking-value-42")  # no secret-like name: caught via api_key_env
    monkeypatch.setenv("MY_SERVICE_TOKEN", "another-plain-value-7")  # caught by its name
    write_config("benchmarks: {}\nmodels: {m: {runner: echo, api_key_env: ACME_CREDS}}\n"
                 "redact_patterns: ['INTERNAL-[0-9]{6}']\n")
    assert redact("a plain-looking-value-42 b another-plain-value-7 c INTERNAL-123456 d zebra-9") == \
        f"a {MASK} b {MASK} c {MASK} d zebra-9"
    add_patterns(["zebra-[0-9]+"])
    assert redact("d zebra-9") == f"d {MASK}"
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="not a valid regex"):
        add_patterns(["(unclosed"])


@pytest.fixture
def no_secret_source(monkeypatch):
    """This process as before any entry point ran: the redactor knows nothing of a config."""
    from evalpipe.core import redact
    from evalpipe.project import redaction

    monkeypatch.setattr(redact, "_source", None)
    monkeypatch.setattr(redact, "_cached", None)
    monkeypatch.setattr(redaction, "_installed", None)
    yield
    redact.install_secret_source(None)  # (the monkeypatch restores what conftest installed)


def test_core_reads_no_config_until_given_one(write_config, no_secret_source, monkeypatch):
    from evalpipe.core.redact import install_secret_source, redact
    from evalpipe.project import Project
    from evalpipe.project.redaction import ProjectSecrets

    monkeypatch.setenv("ACME_CREDS", "plain-looking-value-42")
    write_config("benchmarks: {}\nmodels: {m: {runner: echo, api_key_env: ACME_CREDS, api_base: 'https://h/v1?key=qwerty123'}}\n"
                 "redact_patterns: ['INTERNAL-[0-9]{6}']\n")
    text = "plain-looking-value-42 qwerty123 INTERNAL-123456"
    assert redact(text) == text  # core.redact does not look for a config itself
    install_secret_source(ProjectSecrets(Project.from_file()))
    assert redact(text) == f"{MASK} {MASK} {MASK}"


def test_entry_points_install_the_projects_secrets(write_config, no_secret_source, home, monkeypatch):
    from evalpipe.cli.main import main
    from evalpipe.core.redact import install_secret_source, redact
    from evalpipe.project import Project
    from resources import project_resources

    # the Python API's way in: resources bound to a project built in memory
    project_resources(Project.from_dict({"benchmarks": {}, "models": {"m": {"runner": "echo",
                                                          "api_base": "https://h/v1?key=in-memory-secret-9"}}}, home=home))
    assert redact("x in-memory-secret-9") == f"x {MASK}"
    # the CLI: the config file of the environment
    install_secret_source(None)
    write_config("benchmarks: {}\nmodels: {m: {runner: echo, api_base: 'https://h/v1?key=file-secret-77'}}\n")
    CliRunner().invoke(main, ["validate"])
    assert redact("x file-secret-77") == f"x {MASK}"


def test_fast_enough():
    from evalpipe.core.redact import get_redactor

    r = get_redactor()
    text = "The capital of France is Paris; the answer is 42. " * 12  # 600 chars, nothing to mask
    t = time.perf_counter()
    for _ in range(2000):
        r.redact(text)
    per_call = (time.perf_counter() - t) / 2000
    assert per_call < 200e-6, per_call  # ~10 us measured; the bound leaves room for a loaded CI machine


def test_log_records_are_redacted(monkeypatch):
    from evalpipe.core.redact import install_log_redaction

    install_log_redaction()
    seen = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    log = logging.getLogger("evalpipe.test_redaction")
    h = Keep()
    log.addHandler(h)
    try:
        log.warning("calling with %s", "sk-proj-abcdefghijklmnop1234")
    finally:
        log.removeHandler(h)
    assert seen == [f"calling with {MASK}"]


# ---- end to end ----------------------------------------------------------------------------------------------------
SECRETS = {
    "env_openai": "sk-proj-PLANTEDenv0123456789abcd",
    "env_acme": "acme-5ecret-value-9f8e7d6c",  # only known as a model's api_key_env
    "prompt_hf": "hf_PLANTEDprompt0123456789abc",
    "prompt_bearer": "PLANTEDbearer.abc.def123",
    "prompt_google": "AIzaPLANTEDgoogle0123456789abcdefg",
    "prompt_jina": "jina_PLANTEDjina0123456789abc",
    "prompt_password": "PLANTEDpw-hunter22",
    "prompt_config_pattern": "INTERNAL-123456",
    "prompt_cli_pattern": "project-zebra-77",
    "target": "sk-PLANTEDtarget0123456789abcdef",
    "config_option": "sk-PLANTEDconfig0123456789abcdef",
    "output_pplx": "pplx-PLANTEDoutput0123456789",
    "output_config_pattern": "INTERNAL-654321",
    "output_cli_pattern": "project-zebra-42",
}


@register_runner("test-leaky", replace=True)
class LeakyRunner(Runner):
    """Fails every other sample with the API key in the exception text (as careless client libraries do),
    and otherwise replies with the key in a trajectory."""

    name = "test-leaky"

    async def generate(self, request):
        key = os.environ["OPENAI_API_KEY"]
        if request.sample_id in ("s1", "s3"):
            raise RuntimeError(f"401 Unauthorized: invalid api key {key}")
        return Generation(text=f"ok {key}", trajectory=[{"type": "tool_calls", "tool_calls": [
            {"function": {"name": "fetch", "arguments": json.dumps({"headers": {"Authorization": f"Bearer {key}"}})}}]}])


@pytest.mark.slow
def test_planted_secrets_are_nowhere_on_disk(home, write_config, tmp_path, monkeypatch):
    s = SECRETS
    monkeypatch.setenv("OPENAI_API_KEY", s["env_openai"])
    monkeypatch.setenv("ACME_CREDS", s["env_acme"])
    monkeypatch.setenv("EVALS_TRACING", f"jsonl:{home / 'traces.jsonl'}")
    restore_cli_env(monkeypatch)
    data = tmp_path / "secret.jsonl"
    rows = [
        {"id": "s1", "q": f"My token is {s['prompt_hf']}; what is 2+2?", "a": "4"},
        {"id": "s2", "q": f"Header: Authorization: Bearer {s['prompt_bearer']} and {s['prompt_google']}", "a": "x"},
        {"id": "s3", "q": f"{s['prompt_jina']} / config {{\"password\": \"{s['prompt_password']}\"}}", "a": "y"},
        {"id": "s4", "q": f"ticket {s['prompt_config_pattern']} for {s['prompt_cli_pattern']}, key {s['env_acme']}",
         "a": s["target"]},
    ]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    write_config(f"""
benchmarks:
  smoke:                # a split key the code location knows (partitions are read from the config at import)
    adapter: file
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo, api_key_env: ACME_CREDS}}
  teller: {{runner: echo, reply: target}}
  fixed:
    runner: echo
    reply: fixed
    text: "answer {s['output_pplx']} {s['output_config_pattern']} {s['output_cli_pattern']}"
  leaky: {{runner: test-leaky, api_key_env: OPENAI_API_KEY, api_key: {s['config_option']}}}
redact_patterns: ['INTERNAL-[0-9]{{6}}']
""")
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["--redact-pattern", "project-zebra-[0-9]+", "run", "--benchmark", "smoke",
                                  "--model", "parrot", "--model", "teller", "--model", "fixed", "--model", "leaky",
                                  "--no-progress"], catch_exceptions=False)
    assert r.exit_code in (0, 3), r.output  # 3: the error-rate gate fails for `leaky`, as it should
    x = CliRunner().invoke(main, ["export", "--split", "smoke/extra", "--model", "leaky", "--out",
                                  str(home / "exported")], catch_exceptions=False)
    assert x.exit_code == 0
    for out in (r.output, x.output):
        for secret in s.values():
            assert secret not in out

    files = all_text(home)
    names = {str(p.relative_to(home)).split("/")[0] for p in files}
    # the search really covers the warehouse, journals, artifacts, Dagster's run history, the models and traces
    # (in-process runs capture no compute logs, so Dagster's `storage` folder is not written)
    assert {"warehouse", "journal", "artifacts", "exported", "history", "traces.jsonl"} <= names, names
    assert any(p.suffix == ".parquet" for p in files) and any(p.suffix in (".db", ".sqlite") for p in files)
    assert '"__class__": "ConfigTypeSnap"' in files[home / "history" / "runs.db"]  # snapshots were inflated
    assert found(files, home, s) == []
    # and the run really carried the secrets (masked) through every stage
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path())
    raw = wh.query("select model, sample_id, raw_output, error, trajectory from rollouts order by model, sample_id")
    fixed = raw[raw["model"] == "fixed"]["raw_output"].iloc[0]
    assert fixed == f"answer {MASK} {MASK} {MASK}"
    leaky = raw[raw["model"] == "leaky"]
    assert leaky["error"].dropna().tolist() == [f"RuntimeError: 401 Unauthorized: invalid api key {MASK}"] * 2
    assert MASK in leaky["trajectory"].dropna().iloc[0]
    assert MASK in raw[raw["model"] == "parrot"]["raw_output"].iloc[3]


def test_column_check_flags_every_cell_that_could_be_masked():
    """`could_match_cells` (one RE2 scan per column) says True wherever `could_match` does, and for JSON text
    wherever `redact_obj` of the parsed value changes anything; ordinary cells are False."""
    import random

    r = Redactor(literals=["plain-looking-value-42", 'we"ird\\lit\nx', "ünï-çødé-123"])
    pieces = ["sk-", "SK-", "hf_", "Bearer ", "KEY", "\u212aey", "ſecret", "PASSW", "authorızation", 'token"', "token=",
              "://", "@", "SIG=", "code=", "plain-looking-value-42", 'we"ird\\lit\nx', "ünï-çødé-123", "hello", " ",
              "\n", '"', "\\", "é", "token", "credential", "api_key", "İ", "x"]
    rng = random.Random(5)
    texts = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 4))) for _ in range(4000)]
    flags = r.could_match_cells(texts)
    assert all(f for t, f in zip(texts, flags) if r.could_match(t)) and not flags.all()

    def value(depth=0):
        roll = rng.random()
        if depth > 2 or roll < 0.4:
            return rng.choice(texts)
        if roll < 0.5:
            return rng.choice([1, 2.5, None, True])
        if roll < 0.75:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return {rng.choice(texts + ["role", "content", "max_tokens", "token_id", "Credentials", "Authorızation"]):
                value(depth + 1) for _ in range(rng.randint(0, 3))}

    values = [value() for _ in range(4000)]
    for ensure_ascii in (False, True):  # the writers' spelling, and \u escapes (which could hide a secret)
        cells = [json.dumps(v, ensure_ascii=ensure_ascii) for v in values]
        flags = r.could_match_cells(cells, json_text=True)
        assert all(f for v, f in zip(values, flags) if r.redact_obj(v) != v)
    assert list(r.could_match_cells(['{"role": "user", "content": "What is 2+2?"}', '{"max": 5}', None], True)) == [
        False, False, False]
    assert list(r.could_match_cells(['{"Token_ID": 5}', '"a \\u0073k-x"', '{"password": 1}'], True)) == [True] * 3
    assert Redactor(patterns=["x"]).could_match_cells(["nothing"]).all()  # user regexes: every cell is checked
