"""DSGym's Bio dataset (`adapter: bio`) from a local copy: the fields and semantics of DSGym's own loader
(dsgym/datasets/loaders/dsbio.py), the `hard` split, and a run through the CLI. tests/data/dsbio is a made-up fixture
in DSGym's format (three questions; the data files are placeholders)."""
import json
import shutil
from pathlib import Path

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import ConfigError, DataError
from tests.helpers.cli import cli_in_process

DSBIO = Path(__file__).parent / "data" / "dsbio"


def split(name="hard", **options):
    return SplitConfig(key=f"bio/{name}", benchmark="bio", split=name, adapter="bio",
                       options={"path": str(DSBIO), "protocol": "single_turn", **options}, metrics=None,
                       prompt_template=None, base_dir=Path("."))


def test_hard_split_loads_dsgym_fields():
    samples = list(adapter_for(split()).load())
    assert [s.id for s in samples] == ["0", "1", "2"]  # DSGym's ids: the questions' positions
    first = samples[0]
    assert first.target == "['GENEA', 'GENEB']"  # str(answer), as DSGym's ground_truth: a list as Python writes it
    assert samples[1].target == "42" and samples[2].target == "T cell"
    assert first.metadata["source"] == "dsbio" and first.metadata["answer_is_list"] is True
    assert first.metadata["domain"] == "single-cell biology" and samples[2].metadata["domain"] == "computational biology"
    assert first.metadata["context"].startswith("Domain: single-cell")
    # `/data/bio/x` found below data_dir as bio/x, `/data/dsbio/x` as x
    assert first.files == [str(DSBIO / "bio" / "toy_lung.h5ad")] and samples[1].files == [str(DSBIO / "toy_qc.h5ad")]
    # DSGym's prompt structure: QUESTION, DOMAIN, ANSWER GUIDELINES, the data files; the context is not shown
    assert first.input.startswith("QUESTION: Which 2 marker genes distinguish cluster A from cluster B?\n\n"
                                  "DOMAIN: single-cell biology\nANSWER GUIDELINES: Answer must be a list")
    assert "toy_lung.h5ad" in first.input and "made-up lung atlas" not in first.input
    assert "ANSWER GUIDELINES" not in samples[2].input  # an empty guideline is left out, as DSGym does
    assert adapter_for(split()).metrics() == [{"name": "dsgym_exact_match", "numeric_tolerance": 0.0}]
    assert adapter_for(split()).slices(first) == {"domain": "single-cell biology"}


def test_limit_and_the_file_itself_and_the_shipped_name(tmp_path):
    assert len(list(adapter_for(split(limit=2)).load())) == 2
    assert len(list(adapter_for(split(path=str(DSBIO / "dsbio-hard.json"), data_dir=str(DSBIO))).load())) == 3
    shutil.copytree(DSBIO, tmp_path / "dsbio")  # DSGym's repository ships the hard questions as dsbio.json
    (tmp_path / "dsbio" / "dsbio-hard.json").rename(tmp_path / "dsbio" / "dsbio.json")
    assert len(list(adapter_for(split(path=str(tmp_path / "dsbio"))).load())) == 3


@pytest.mark.parametrize("name,words", [
    ("easy", "`easy` split is not implemented"),
    ("medium", "has no split 'medium'; its splits are hard, easy"),
])
def test_splits_as_dsgym_selects_them(name, words):
    with pytest.raises(ConfigError, match=words):
        list(adapter_for(split(name)).load())


def test_bad_input_is_named(tmp_path):
    with pytest.raises(DataError, match=r"no dsbio-hard.json or dsbio.json in"):
        list(adapter_for(split(path=str(tmp_path))).load())
    (tmp_path / "dsbio-hard.json").write_text(json.dumps([{"question": "q", "answer": "a",
                                                           "data": ["/data/bio/absent.h5ad"]}]))
    with pytest.raises(DataError, match=r"question 1: data file '/data/bio/absent.h5ad' not found.*data_dir"):
        list(adapter_for(split(path=str(tmp_path))).load())
    (tmp_path / "dsbio-hard.json").write_text(json.dumps([{"question": "q"}]))
    with pytest.raises(DataError, match="question 1: expected an object with 'question', 'answer'"):
        list(adapter_for(split(path=str(tmp_path))).load())


# (prediction, ground truth, verdict with dsbio's numeric_tolerance 0, with DSGym's default 0.03): DSGym's
# ExactMatchMetric decides in this order: strip+lower equality, list literals as sets, numbers by relative error
@pytest.mark.parametrize("pred,gold,dsbio,default", [
    ("['GENEA', 'GENEB']", "['GENEA', 'GENEB']", True, True),
    ("['GENEB','genea']", "['GENEA', 'GENEB']", True, True),      # lists: sets of lowercased items
    ('["GENEA", "GENEB", "GENEA"]', "['GENEA', 'GENEB']", True, True),  # duplicates: the same set
    ("['GENEA']", "['GENEA', 'GENEB']", False, False),
    ("GENEA, GENEB", "['GENEA', 'GENEB']", False, False),         # not a list literal
    ("[1, 2.0]", "[2.0, 1]", True, True),
    (" T Cell ", "T cell", True, True),                           # stripped, lowercased
    ("T cell.", "T cell", False, False),                          # no punctuation removed
    ("42", "42.0", False, True),                                  # numbers: relative error < tolerance, strictly
    ("43", "42", False, True),
    ("44", "42", False, False),
    ("0.01", "0", False, True),                                   # against 0: |prediction| < tolerance
    ("", "42", False, False),
    (None, "42", False, False),
])
def test_dsgym_exact_match(pred, gold, dsbio, default):
    from evalpipe.metrics import JudgeInput, build_metric

    bio_metric = adapter_for(split()).metrics()[0]
    assert build_metric(bio_metric).score(JudgeInput("s", "q", gold, pred)).correct is dsbio
    assert build_metric("dsgym_exact_match").score(JudgeInput("s", "q", gold, pred)).correct is default


def test_dsgym_exact_match_settings():
    from evalpipe.metrics import JudgeInput, build_metric

    with pytest.raises(ConfigError, match="numeric_tolerance must be a number"):
        build_metric({"name": "dsgym_exact_match", "numeric_tolerance": "0"})
    assert build_metric("dsgym_exact_match").score(JudgeInput("s", "q", None, "x")).status == "unscored"


def test_run_through_the_cli(home, write_config, monkeypatch):
    write_config(f"""
benchmarks:
  bio:
    adapter: bio
    splits: {{hard: {{}}}}
    options: {{path: {DSBIO}, protocol: single_turn, execute_code: false}}
models:
  perfect: {{runner: echo, reply: target}}
  fixed: {{runner: echo, reply: fixed, text: "FINAL ANSWER: 42"}}
  shuffled: {{runner: echo, reply: fixed, text: "FINAL ANSWER: ['geneb', 'GENEA']"}}
""")
    cli = cli_in_process(monkeypatch)
    r = cli("run", "--model", "perfect", "--model", "fixed", "--model", "shuffled", "--no-progress")
    assert r.exit_code == 0, r.output
    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    got = Warehouse(warehouse_path()).query(
        "select model, value, n from metrics where benchmark_split = 'bio/hard' and metric = 'dsgym_exact_match' "
        "and slice = 'all' order by model")
    assert got.values.tolist() == [["fixed", pytest.approx(1 / 3), 3], ["perfect", 1.0, 3],
                                   ["shuffled", pytest.approx(1 / 3), 3]]
