"""The `.j2` wrapper written as a JSON object (the tool-integration document's
`{"system": "{{ system }}", "user": "{{ user }}"}`): values are JSON-escaped, so prompts with quotes, backslashes and
newlines render; `tojson` templates render as before."""
import json

import pytest
from click.testing import CliRunner

from evalpipe.core.errors import DataError
from evalpipe.pipeline.prompt_wrappers import load_wrapper
from tests.helpers.cli import restore_cli_env

DOC_J2 = '{"system": "{{ system }}", "user": "{{ user }}"}\n'  # the design document's text, as users copy it
HARD = 'He said "stop".\nThen: C:\\temp\\new {x} \t\u00e9'


def test_documented_template_escapes_quotes_backslashes_and_newlines(tmp_path):
    (tmp_path / "doc.j2").write_text(DOC_J2)
    w = load_wrapper("doc.j2", tmp_path)
    assert w.render(HARD, system='Be "terse".') == [{"role": "system", "content": 'Be "terse".'},
                                                    {"role": "user", "content": HARD}]


def test_tojson_templates_and_text_around_values_are_unchanged(tmp_path):
    (tmp_path / "t.j2").write_text(
        '{"system": {{ system | tojson }}, "user": "Q: {{ user }} ({{ tools | length }} tools)"}')
    (tmp_path / "u.j2").write_text('{"system": {{ system | tojson }}, "user": {{ ("Q: " ~ user) | tojson }}}')
    tools = [{"type": "function", "function": {"name": "f"}}]
    assert load_wrapper("t.j2", tmp_path).render(HARD, system="S", tools=tools)[1]["content"] == f"Q: {HARD} (1 tools)"
    assert load_wrapper("u.j2", tmp_path).render(HARD, system='a "b"') == [
        {"role": "system", "content": 'a "b"'}, {"role": "user", "content": f"Q: {HARD}"}]


def test_a_value_outside_quotes_says_how_to_fix_it(tmp_path):
    (tmp_path / "bare.j2").write_text('{"user": {{ user }}}')
    with pytest.raises(DataError, match=r'put each value in quotes, "\{\{ user \}\}", or use the tojson filter'):
        load_wrapper("bare.j2", tmp_path).render("hi")


def test_a_template_starting_with_a_tag_is_not_escaped(tmp_path):
    # its JSON can't be told from its Jinja2: it renders as before (tojson where text goes)
    (tmp_path / "set.j2").write_text('{% set q = "Q: " ~ user %}{"user": {{ q | tojson }}}')
    assert load_wrapper("set.j2", tmp_path).render(HARD) == [{"role": "user", "content": f"Q: {HARD}"}]


def test_documented_template_through_the_cli(tmp_path, home, write_config, monkeypatch):
    restore_cli_env(monkeypatch)
    data = tmp_path / "hard.jsonl"
    data.write_text(json.dumps({"id": "h1", "q": HARD, "a": "x"}) + "\n")
    wrapper = tmp_path / "doc.j2"
    wrapper.write_text(DOC_J2)
    write_config(f"""
benchmarks:
  smoke:
    adapter: file
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo}}
""")
    from evalpipe.cli.main import main

    r = CliRunner().invoke(main, ["run", "--benchmark", "smoke", "--model", "parrot", "--prompt-wrapper", str(wrapper),
                                  "--no-progress"], catch_exceptions=False)
    assert r.exit_code == 0, r.output
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    wh = Warehouse(warehouse_path())
    assert json.loads(wh.query("select messages from prompts")["messages"][0])[1] == {"role": "user", "content": HARD}
    assert wh.query("select raw_output from rollouts")["raw_output"][0] == HARD  # echo got the text as written
