"""QRData: the original layout (QRData.json + data/ or data.zip), slices, and the official eval.py scoring."""
import json
import shutil
import zipfile
from pathlib import Path

import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.qrdata import extract_final, qrdata_correct
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import ConfigError, DataError
from evalpipe.metrics import JudgeInput, build_metric

REPO = Path(__file__).parents[1]
SAMPLE = REPO / "data" / "qrdata_sample" / "benchmark"


def load(path=SAMPLE, **options):
    opts = {"path": str(path), **options} if path is not None else options
    sc = SplitConfig(key="qrdata/test", benchmark="qrdata", split="test", adapter="qrdata", options=opts, metrics=None,
                     prompt_template=None, base_dir=REPO)
    a = adapter_for(sc)
    return a, list(a.load())


def test_loads_questions_files_and_slices():
    a, samples = load()
    assert [s.target for s in samples] == ["171.7", "yes", "-3.67", "treatment group"]
    assert [a.slices(s) for s in samples] == [
        {"question_type": "statistical", "answer_kind": "numerical"},
        {"question_type": "statistical", "answer_kind": "multiple_choice"},
        {"question_type": "causal", "answer_kind": "numerical"},
        {"question_type": "causal", "answer_kind": "multiple_choice"}]
    assert samples[3].choices == ["treatment group", "control group"] and "Options: treatment group; control group" in samples[3].input
    assert samples[2].files == [str((SAMPLE / "data" / "trial.csv").resolve())]
    assert a.metrics() == ["qrdata", {"name": "exact_match", "numeric_tolerance": 0.03}]
    assert [s.id for s in load(question_types="causal", answer_kinds=["numerical"])[1]] == ["2"]


def test_data_zip_is_read_as_it_is(tmp_path, home):
    root = tmp_path / "benchmark"
    root.mkdir()
    shutil.copy(SAMPLE / "QRData.json", root)
    with zipfile.ZipFile(root / "data.zip", "w") as z:  # files under a folder inside the zip, as archives often are
        for f in (SAMPLE / "data").iterdir():
            z.write(f, f"data/{f.name}")
    _, samples = load(root)
    assert Path(samples[0].files[0]).read_text() == (SAMPLE / "data" / "heights.csv").read_text()
    assert str(home) in samples[0].files[0]  # extracted once under $DAGSTER_HOME/cache/qrdata
    (root / "data.zip").write_bytes(b"not a zip")
    with pytest.raises(DataError, match="data.zip: not a readable zip file"):
        load(root)


def test_errors(tmp_path):
    with pytest.raises(ConfigError, match="published on GitHub.*not on the Hugging Face Hub"):
        load(None)
    root = tmp_path / "b"
    root.mkdir()
    (root / "QRData.json").write_text(json.dumps([{"question": "q", "answer": "1", "data_files": ["x.csv"],
                                                    "meta_data": {"question_type": "numerical"}}]))
    with pytest.raises(DataError, match="question 1: data file 'x.csv' not found"):
        load(root)
    (root / "QRData.json").write_text(json.dumps([{"question": "q", "answer": "many", "data_files": [],
                                                    "meta_data": {"question_type": "numerical"}}]))
    with pytest.raises(DataError, match="numerical answer 'many' is not a number"):
        load(root)


@pytest.mark.parametrize("pred,gold,kind,ok", [
    ("0.20", "0.20", "numerical", True),
    ("The answer is 0.205 (about)", "0.20", "numerical", True),   # first number, within 3%
    ("0.21", "0.20", "numerical", False),                          # 5% off
    ("20%", "0.20", "numerical", True),                            # percent divided by 100
    ("0.2", "20%", "numerical", True),
    ("-3.60", "-3.67", "numerical", True),
    ("0", "0", "numerical", False),                                # strict bounds: 0 can't be matched, as in eval.py
    ("no number", "3", "numerical", False),
    ("Treatment Group, since ...", "treatment group", "multiple_choice", True),
    ("the treatment group", "treatment group", "multiple_choice", False),  # must START with the reference
    ("yes", "Yes", "multiple_choice", True),
])
def test_official_scoring(pred, gold, kind, ok):
    assert qrdata_correct(pred, gold, kind)[0] is ok
    s = build_metric("qrdata").score(JudgeInput("s", "q", gold, pred, metadata={"answer_kind": kind}))
    assert s.value == float(ok)


def test_final_answer_extraction_and_exact_match_tolerance():
    assert extract_final("Reasoning...\nFINAL ANSWER: **0.23**\nmore") == "**0.23**"  # markup kept, as given
    assert extract_final("0.23") == "0.23"
    em = build_metric({"name": "exact_match", "numeric_tolerance": 0.03})
    assert [em.score(JudgeInput("s", "q", g, p)).value for p, g in
            [("-3.60", "-3.67"), ("0.21", "0.20"), ("0.02", "0"), ("0.03", "0"), ("treatment group", "Treatment group")]] \
        == [1.0, 0.0, 1.0, 0.0, 1.0]
    with pytest.raises(ConfigError, match="numeric_tolerance must be a number"):
        build_metric({"name": "exact_match", "numeric_tolerance": "lots"})


# The whole path, reply -> extracted answer -> verdict, against the official eval.py given that answer as `pred`:
# the extraction takes the text after the last FINAL ANSWER: (its first non-empty line, outer whitespace trimmed) and
# nothing else, so markup is scored as given (eval.py lowercases, then multiple choice: pred starts with the answer;
# numerical: the first number within 3%).
@pytest.mark.parametrize("reply,gold,kind,official", [
    ("Reasoning.\nFINAL ANSWER: **yes**", "yes", "multiple_choice", False),
    ("FINAL ANSWER: `treatment group`", "treatment group", "multiple_choice", False),
    ("FINAL ANSWER: *Yes*", "Yes", "multiple_choice", False),
    ("FINAL ANSWER: yes", "yes", "multiple_choice", True),
    ("Final answer:\n\n  Yes, the effect is significant.", "yes", "multiple_choice", True),
    ("FINAL ANSWER: no\nFINAL ANSWER: yes", "yes", "multiple_choice", True),   # the last marker
    ("The answer is yes.", "yes", "multiple_choice", False),                    # no marker: the whole reply
    ("FINAL ANSWER: **0.23**", "0.23", "numerical", True),                      # the first number is still 0.23
    ("FINAL ANSWER: `-3.60`", "-3.67", "numerical", True),
    ("FINAL ANSWER: 20%", "0.2", "numerical", True),
    ("FINAL ANSWER: * 0.30 *", "0.23", "numerical", False),
])
def test_reply_to_verdict_as_the_official_eval(reply, gold, kind, official):
    from evalpipe.benchmarks.qrdata import QRDataAdapter

    pred = QRDataAdapter.extract_answer(None, reply)
    s = build_metric("qrdata").score(JudgeInput("s", "q", gold, pred, metadata={"answer_kind": kind}))
    assert s.value == float(official) and s.correct is official


def test_strip_markup_is_a_named_setting_off_by_default():
    m = build_metric({"name": "qrdata", "strip_markup": True})
    for pred, gold in [("**yes**", "yes"), ("`treatment group`", "treatment group"), ("** yes **", "yes")]:
        assert m.score(JudgeInput("s", "q", gold, pred, metadata={"answer_kind": "multiple_choice"})).value == 1.0
        assert build_metric("qrdata").score(JudgeInput("s", "q", gold, pred, metadata={"answer_kind": "multiple_choice"})).value == 0.0
    with pytest.raises(ConfigError, match="'qrdata': setting strip_markup must be true or false"):
        build_metric({"name": "qrdata", "strip_markup": "yes"})
    with pytest.raises(ConfigError, match="qrdata: unknown setting"):
        build_metric({"name": "qrdata", "strip_mark": True})
