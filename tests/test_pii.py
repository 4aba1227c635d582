"""Opt-in PII masking (`pii: {entities: [...]}`): the rules, the config key, and a real CLI run whose prompts hold
an e-mail address and a phone number, searched for in every file under DAGSTER_HOME with pii on and off."""
import json

import pytest
from click.testing import CliRunner

from evalpipe.core.errors import ConfigError
from evalpipe.core.redact import MASK, Redactor, pii_masker
from tests.helpers.cli import restore_cli_env
from tests.helpers.secrets import all_text

EMAIL, PHONE = "jane.doe@example.com", "+1 415-555-0132"


@pytest.fixture(scope="module")
def pii_redactor():
    return Redactor(pii=pii_masker(("email", "phone")))


# ---- the rules ---------------------------------------------------------------------------------------------------
def test_entities_are_masked_in_text_and_in_stored_json_text(pii_redactor):
    r = pii_redactor
    assert r.redact(f"Write to {EMAIL} or call {PHONE}.") == "Write to [EMAIL] or call [PHONE]."
    # a message list stored as JSON text: a phone number right after an escaped newline is found, the JSON stays valid
    content = f'Say "hi" to {EMAIL}.\nTel:\n{PHONE}; key sk-abcdefghijklmnopqrst'
    text = json.dumps([{"role": "user", "content": content}])
    out = r.redact(text)
    assert EMAIL not in out and "415-555-0132" not in out
    assert json.loads(out)[0]["content"] == f'Say "hi" to [EMAIL].\nTel:\n[PHONE]; key {MASK}'


def test_scored_fields_ids_and_model_output_keep_pii(pii_redactor):
    r = pii_redactor
    row = {"sample_id": "q-4155550132", "target": EMAIL, "choices": [EMAIL], "input": EMAIL,
           "metadata": {"contact": PHONE}}
    assert r.redact_obj(row) == {"sample_id": "q-4155550132", "target": EMAIL, "choices": [EMAIL], "input": "[EMAIL]",
                                 "metadata": {"contact": "[PHONE]"}}
    assert r.for_field("prediction")(EMAIL) == EMAIL  # what the model wrote is scored as written
    assert r.for_field("target")(EMAIL) == EMAIL
    assert r.for_field("prompt_text")(EMAIL) == "[EMAIL]"
    assert r.for_field("target")("sk-abcdefghijklmnopqrst") == MASK  # secrets are masked everywhere, as before


def test_column_scan_flags_every_cell_that_holds_pii(pii_redactor):
    # the warehouse and the artifacts redact only the cells this scan flags: it must not miss one
    cells = [f"mail {EMAIL}", "what is 2+2?", json.dumps({"q": f"call:\n{PHONE}"}), None, "no digits, no at"]
    assert pii_redactor.could_match_cells(cells).tolist() == [True, False, True, False, False]
    assert pii_redactor.could_match_cells(cells, json_text=True).tolist()[:3] == [True, False, True]
    assert not Redactor().could_match_cells(cells).any()  # pii off: nothing to look at, as before


def test_off_by_default():
    assert Redactor().redact(f"Write to {EMAIL} or call {PHONE}.") == f"Write to {EMAIL} or call {PHONE}."


def test_config_key_is_checked(write_config):
    from evalpipe.project.loader import load_config

    p = write_config("benchmarks: {}\npii: {entities: [email, phon]}\n")
    with pytest.raises(ConfigError, match=r"pii\.entities\.1: input should be .*'phone'.*\(got 'phon'\)"):
        load_config(p)
    p = write_config("benchmarks: {}\npii: {entities: [email, phone], locale: en_GB}\n")
    assert load_config(p).raw["pii"]["locale"] == "en_GB"


# ---- a real run --------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("pii_on", [True, False], ids=["pii-on", "pii-off"])
def test_pii_in_prompts_is_masked_on_disk_and_targets_still_score(pii_on, home, write_config, tmp_path, monkeypatch):
    restore_cli_env(monkeypatch)
    data = tmp_path / "contacts.jsonl"
    answer = "answers@example.org"  # a target that is itself an e-mail address: scored as written
    rows = [{"id": "c1", "q": f"Who owns {EMAIL}? Call {PHONE}.", "a": answer},
            {"id": "c2", "q": "What is 2+2?", "a": "4"}]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    config = f"""
benchmarks:
  smoke:
    adapter: file
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo}}
  teller: {{runner: echo, reply: target}}
PII_SETTING
"""
    write_config(config.replace("PII_SETTING", "pii: {entities: [email, phone]}" if pii_on else ""))
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--benchmark", "smoke", "--model", "parrot", "--model", "teller",
                                  "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    files = all_text(home)
    where = {str(p.relative_to(home)).split("/")[0] for p, text in files.items()
             if EMAIL in text or "415-555-0132" in text}
    samples = [p for p in files if p.name == "samples.jsonl"]
    assert samples and any(p.suffix == ".parquet" for p in files)
    if pii_on:
        assert where == set(), where
        assert not any(EMAIL in t for t in (r.output,))
    else:  # as before: in clear in the warehouse, the journal and the artifacts
        assert {"warehouse", "journal", "artifacts"} <= where, where
        assert any(EMAIL in files[p] for p in samples)

    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path())
    scores = wh.query("select model, sample_id, target, score from judgements order by model, sample_id")
    teller = scores[scores["model"] == "teller"]
    assert teller["target"].tolist() == [answer, "4"]  # the target kept, and the perfect model still scores 1
    assert teller["score"].tolist() == [1.0, 1.0]
    parrot = wh.query("select raw_output from rollouts where model = 'parrot' and sample_id = 'c1'")["raw_output"][0]
    # the prompt the model got is the one stored: masked with pii on
    assert parrot == ("Who owns [EMAIL]? Call [PHONE]." if pii_on else rows[0]["q"])
    if not pii_on:  # turning pii on changes what the model is sent: the rollouts re-run, not taken from the journal
        write_config(config.replace("PII_SETTING", "pii: {entities: [email, phone]}"))
        again = CliRunner().invoke(main, ["run", "--benchmark", "smoke", "--model", "parrot", "--no-progress"],
                                   catch_exceptions=False)
        assert again.exit_code == 0, again.output
        roll = wh.query("select cached, raw_output from rollouts where model = 'parrot' order by sample_id")
        assert not roll["cached"].any()
        assert roll["raw_output"][0] == "Who owns [EMAIL]? Call [PHONE]."
