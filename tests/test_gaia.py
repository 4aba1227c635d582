"""The GAIA adapter: the shipped sample, column mapping and its errors, the options, the Hub loader's errors."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pandas as pd
import pytest

from evalpipe.benchmarks import adapter_for
from evalpipe.benchmarks.gaia import GAIA_INSTRUCTIONS, extract_final_answer, normalize_level
from evalpipe.benchmarks.gaia_scorer import question_scorer
from evalpipe.core.config import SplitConfig
from evalpipe.core.errors import DataError
from evalpipe.pipeline.stages import build_dataset

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "gaia_sample"


def split(options=None, name="validation", prompt_template=None, base_dir=REPO) -> SplitConfig:
    return SplitConfig(key=f"gaia/{name}", benchmark="gaia", split=name, adapter="gaia",
                       options=dict(options or {}), metrics=None, prompt_template=prompt_template, base_dir=base_dir)


def load(options=None, **kw):
    return list(adapter_for(split(options, **kw)).load())


def write_parquet(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path, index=False)
    return path


# ---- the shipped sample -----------------------------------------------------------------------------------------
def test_shipped_validation_sample_maps_every_column():
    samples = load({"path": "data/gaia_sample"})
    assert len(samples) == 29
    raw = pd.read_parquet(SAMPLE / "2023/validation/metadata.parquet")
    assert list(raw.columns) == ["task_id", "Question", "Level", "Final answer", "file_name", "Annotator Metadata"]
    assert [s.id for s in samples] == list(raw["task_id"])
    assert [s.target for s in samples] == list(raw["Final answer"])
    by_level = pd.Series([s.metadata["Level"] for s in samples]).value_counts().to_dict()
    assert by_level == {1: 12, 2: 10, 3: 7}
    s = samples[0]
    assert s.input == raw.loc[0, "Question"] and s.system == GAIA_INSTRUCTIONS
    assert set(s.metadata) == {"Level", "file_name", "Annotator Metadata"}
    assert s.metadata["Annotator Metadata"]["Number of steps"] == "1"
    # every answer of the set is right when given back verbatim, or wrapped in the answer template
    assert all(question_scorer(s.target, s.target) for s in samples)
    assert all(question_scorer(extract_final_answer(f"thinking...\nFINAL ANSWER: {s.target}"), s.target) for s in samples)


def test_attachments_get_an_absolute_path_in_prompt_metadata_and_files():
    samples = load({"path": str(SAMPLE)})
    with_files = [s for s in samples if s.metadata["file_name"]]
    assert len(with_files) == 7
    exts = sorted(Path(s.files[0]).suffix for s in with_files)
    assert exts == [".csv"] * 5 + [".txt"] * 2
    for s in with_files:
        path = Path(s.files[0])
        assert path.is_absolute() and path.is_file() and path.name == s.metadata["file_name"]
        assert s.metadata["file_path"] == str(path) and str(path) in s.input
    assert all(s.files == [] and "file_path" not in s.metadata for s in samples if not s.metadata["file_name"])


def test_test_split_answers_are_hidden_so_targets_are_none():
    samples = load({"path": "data/gaia_sample"}, name="test")
    assert len(samples) == 6 and all(s.target is None for s in samples)
    assert sum(bool(s.files) for s in samples) == 2


def test_path_may_name_the_parquet_file_or_a_split_folder(tmp_path):
    direct = load({"path": "data/gaia_sample/2023/validation/metadata.parquet"})
    folder = load({"path": "data/gaia_sample/2023"})  # <path>/<split>/metadata.parquet
    assert [s.id for s in direct] == [s.id for s in folder] and len(direct) == 29
    assert direct[5].files == folder[5].files and direct[5].files


# ---- columns ------------------------------------------------------------------------------------------------------
def test_lowercase_columns_string_levels_and_row_index_ids(tmp_path):
    f = write_parquet(tmp_path / "metadata.parquet", [
        {"question": "Q one", "final_answer": "1", "Level": "2", "extra": "x"},
        {"question": "Q two", "final_answer": "?", "Level": " 3 ", "extra": None},
    ])
    samples = list(adapter_for(split({"path": str(f)})).load())
    assert [s.id for s in samples] == ["0", "1"]
    assert [s.target for s in samples] == ["1", None]
    assert samples[0].metadata == {"Level": "2", "extra": "x"}
    ad = adapter_for(split({"path": str(f)}))
    assert [ad.slices(s) for s in samples] == [{"level": "2"}, {"level": "3"}]


def test_answer_and_id_alternatives(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text('{"id": "a", "Question": "Q", "answer": "yes", "Level": 1}\n')
    (s,) = load({"path": str(f)})
    assert (s.id, s.target, s.metadata) == ("a", "yes", {"Level": 1})


@pytest.mark.parametrize("cols,missing", [
    ({"prompt": "Q", "Final answer": "1"}, "no a question column"),
    ({"Question": "Q", "solution": "1"}, "no an answer column"),
])
def test_missing_required_columns_list_what_was_found(tmp_path, cols, missing):
    f = write_parquet(tmp_path / "metadata.parquet", [cols])
    with pytest.raises(ValueError) as err:
        load({"path": str(f)})
    msg = str(err.value)
    assert isinstance(err.value, DataError) and missing in msg and "\n" not in msg
    for c in cols:
        assert repr(c) in msg


def test_missing_attachment_names_the_row(tmp_path):
    f = write_parquet(tmp_path / "metadata.parquet", [
        {"task_id": "t1", "Question": "Q", "Final answer": "1", "Level": 1, "file_name": ""},
        {"task_id": "t2", "Question": "Q", "Final answer": "1", "Level": 1, "file_name": "gone.csv"},
    ])
    with pytest.raises(DataError, match=r"row 2: attachment 'gone.csv' not found"):
        load({"path": str(f)})


def test_duplicate_task_ids_are_refused(tmp_path):
    f = write_parquet(tmp_path / "metadata.parquet", [
        {"task_id": "t1", "Question": "Q", "Final answer": "1"}, {"task_id": "t1", "Question": "Q2", "Final answer": "2"}])
    with pytest.raises(DataError, match=r"row 2: duplicate id 't1' \(first at row 1\)"):
        load({"path": str(f)})


# ---- options ------------------------------------------------------------------------------------------------------
def levels_of(samples):
    return [s.metadata["Level"] for s in samples]


def test_levels_filter_accepts_ints_and_strings():
    assert set(levels_of(load({"path": "data/gaia_sample", "levels": [1, "3"]}))) == {1, 3}
    assert len(load({"path": "data/gaia_sample", "levels": 2})) == 10


def test_max_n_per_level_shuffle_seed_and_limit():
    base = {"path": "data/gaia_sample"}
    capped = load({**base, "max_n": 2})
    assert levels_of(capped) == [1, 1, 2, 2, 3, 3]
    a = load({**base, "shuffle": True, "seed": 7})
    b = load({**base, "shuffle": True, "seed": 7})
    c = load({**base, "shuffle": True, "seed": 8})
    plain = load(base)
    assert [s.id for s in a] == [s.id for s in b] != [s.id for s in plain]
    assert [s.id for s in a] != [s.id for s in c] and sorted(s.id for s in a) == sorted(s.id for s in plain)
    # limit comes after the level filter and the shuffle
    limited = load({**base, "levels": [3], "shuffle": True, "seed": 7, "limit": 3})
    assert levels_of(limited) == [3, 3, 3]
    level3_shuffled = load({**base, "levels": [3], "shuffle": True, "seed": 7})
    level3_in_order = [s.id for s in plain if s.metadata["Level"] == 3]
    assert [s.id for s in limited] == [s.id for s in level3_shuffled][:3] != level3_in_order[:3]


def test_limit_is_applied_once_through_the_pipeline():
    df = build_dataset(split({"path": "data/gaia_sample", "levels": [2, 3], "limit": 4, "max_n": 3}))
    assert len(df) == 4
    levels = [json.loads(m)["Level"] for m in df["metadata"]]
    assert levels == [2, 2, 2, 3]
    assert [json.loads(s) for s in df["slices"]] == [{"level": "2"}] * 3 + [{"level": "3"}]


def test_bad_option_values_are_config_errors():
    from evalpipe.core.errors import ConfigError

    with pytest.raises(ConfigError, match="'max_n' must be a non-negative integer"):
        load({"path": "data/gaia_sample", "max_n": "lots"})


def test_prompt_template_and_system_prompt_override():
    samples = load({"path": "data/gaia_sample", "system_prompt": None, "levels": [1]},
                   prompt_template="[L{{ level }}] {{ question }}{% if file_path %} <{{ file_path }}>{% endif %}")
    assert all(s.system is None for s in samples)
    assert samples[0].input.startswith("[L1] How many days")
    with_file = next(s for s in samples if s.files)
    assert with_file.input.endswith(f"<{with_file.files[0]}>")


def test_normalize_level():
    assert [normalize_level(v) for v in (1, 1.0, "1", " 2 ", "3.0", "hard", None)] == ["1", "1", "1", "2", "3", "hard", None]


# ---- answer extraction ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("output,answer", [
    ("Let me think.\nFINAL ANSWER: 42", "42"),
    ("FINAL ANSWER: 1\nwait, no.\nFINAL ANSWER: 2", "2"),      # the last marker wins
    ("**FINAL ANSWER:** Paris", "Paris"),
    ("Final answer: `blue, red`", "blue, red"),
    ("final  answer:\n\n  seagull  \n(done)", "seagull"),
    ("Paris", "Paris"),                                        # no marker: the whole reply
    ("  17 \n", "17"),
    ("FINAL ANSWER:", ""),
    (None, None),
])
def test_extract_final_answer(output, answer):
    assert extract_final_answer(output) == answer


# ---- the Hub loader -----------------------------------------------------------------------------------------------
def test_offline_without_a_local_copy_fails_at_once_with_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    start = time.monotonic()
    with pytest.raises(DataError) as err:
        load({"cache_dir": str(tmp_path / "hf-cache")})
    msg = str(err.value)
    assert time.monotonic() - start < 5
    assert "\n" not in msg and "HF_TOKEN" in msg and "path:" in msg
    assert "https://huggingface.co/datasets/gaia-benchmark/GAIA" in msg and "HF_HUB_OFFLINE" in msg


class _GatedHub(BaseHTTPRequestHandler):
    """Answers every request the way the Hub answers for a gated repo without an accepted-terms token."""

    def _refuse(self):
        body = b'{"error": "Access to dataset gaia-benchmark/GAIA is restricted."}'
        self.send_response(401)
        self.send_header("X-Error-Code", "GatedRepo")
        self.send_header("X-Error-Message", "Access to dataset gaia-benchmark/GAIA is restricted.")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_HEAD = _refuse

    def log_message(self, *args):
        pass


def test_gated_dataset_error_says_to_accept_the_terms(tmp_path, monkeypatch):
    from huggingface_hub import constants

    server = ThreadingHTTPServer(("127.0.0.1", 0), _GatedHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("HF_HUB_OFFLINE", "0")
        monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
        monkeypatch.delenv("HF_TOKEN", raising=False)
        with pytest.raises(DataError) as err:
            load({"cache_dir": str(tmp_path / "hf-cache"), "endpoint": f"http://127.0.0.1:{server.server_port}"})
    finally:
        server.shutdown()
    msg = str(err.value)
    assert "gated" in msg and "HF_TOKEN" in msg and "accepted the terms" in msg and "path:" in msg
    assert "\n" not in msg


# ---- through the Dagster graph: per-level accuracy, unscored hidden answers -------------------------------------
@pytest.mark.slow
def test_per_level_metrics_through_the_graph(instance, home, write_config):
    from eval_assets.launch import evaluate
    from evalpipe.project import load_config
    from evalpipe.store.warehouse import Warehouse

    write_config("""
benchmarks:
  gaia:
    adapter: gaia
    splits: [validation, test]
    options: {path: {repo}/data/gaia_sample}
models:
  perfect: {runner: echo, reply: target}
  wrong:
    runner: echo
    reply: fixed
    text: "Six times seven... let me see.\\nFINAL ANSWER: **42**"
""")
    result = evaluate(load_config(), ["gaia/validation"], ["perfect", "wrong"], instance=instance)
    assert result.success, result
    wh = Warehouse(home / "warehouse.duckdb")
    rows = wh.query("select benchmark_split as s, model, slice, value, n, n_unscored, n_errors from metrics "
                    "where metric = 'gaia' order by s, model, slice")
    got = {(r.s, r.model, r.slice): (None if pd.isna(r.value) else round(r.value, 4), r.n, r.n_unscored, r.n_errors)
           for r in rows.itertuples()}
    assert got == {
        ("gaia/validation", "perfect", "all"): (1.0, 29, 0, 0),
        ("gaia/validation", "perfect", "level=1"): (1.0, 12, 0, 0),
        ("gaia/validation", "perfect", "level=2"): (1.0, 10, 0, 0),
        ("gaia/validation", "perfect", "level=3"): (1.0, 7, 0, 0),
        ("gaia/validation", "wrong", "all"): (round(1 / 29, 4), 29, 0, 0),
        ("gaia/validation", "wrong", "level=1"): (round(1 / 12, 4), 12, 0, 0),
        ("gaia/validation", "wrong", "level=2"): (0.0, 10, 0, 0),
        ("gaia/validation", "wrong", "level=3"): (0.0, 7, 0, 0),
    }
    j = wh.query("select j.prediction, raw_output, score, reason, normalized_prediction, normalized_target "
                 "from judgements j join rollouts using (benchmark_split, model, sample_id) "
                 "where model = 'wrong' and benchmark_split = 'gaia/validation' and target = '42' and metric = 'gaia'")
    assert j.to_dict("records") == [{
        "prediction": "42", "raw_output": "Six times seven... let me see.\nFINAL ANSWER: **42**", "score": 1.0,
        "reason": "number: equal", "normalized_prediction": "42.0", "normalized_target": "42.0"}]
    board = wh.query("select model, rank from leaderboard where benchmark_split = 'gaia/validation' "
                     "and metric = 'gaia' order by rank")
    assert board.to_dict("records") == [{"model": "perfect", "rank": 1}, {"model": "wrong", "rank": 2}]
    # the stricter variant is reported beside the official score (the adapter's default metrics)
    assert set(wh.query("select distinct metric from metrics where benchmark_split = 'gaia/validation' "
                        "and slice = 'all' and metric like 'gaia%'")["metric"]) == {"gaia", "gaia_strict"}


def test_hidden_answers_are_unscored_not_wrong(tmp_path):
    """The test split through the same stage functions the assets call (the graph itself is covered above)."""
    from evalpipe.core.config import ModelConfig
    from evalpipe.pipeline.stages import build_leaderboard, build_prompts, compute_metrics, judge, run_rollouts
    from evalpipe.runners import RunSettings, build_runner

    sp = split({"path": "data/gaia_sample"}, name="test")
    prompts = build_prompts(sp, "wrong", build_dataset(sp))
    model = ModelConfig(key="wrong", runner="echo", options={"reply": "fixed", "text": "FINAL ANSWER: 168"})
    rollouts = run_rollouts(sp, model, prompts, build_runner(model), RunSettings(), journal_file=tmp_path / "j.sqlite")
    judged = judge(sp, prompts, rollouts)
    assert set(judged["status"]) == {"unscored"} and judged["score"].isna().all()
    metrics = compute_metrics(sp.key, "wrong", judged)
    rows = {r.slice: (r.n, r.n_unscored, r.n_errors) for r in metrics.itertuples() if r.metric == "gaia"}
    assert rows == {"all": (0, 6, 0), "level=1": (0, 2, 0), "level=2": (0, 2, 0), "level=3": (0, 2, 0)}
    assert metrics.loc[metrics["slice"] == "all", "value"].isna().all()
    board = build_leaderboard(metrics)  # no value, so no rank; not a crash
    assert sorted(board["metric"]) == ["gaia", "gaia_strict"]  # the official score and its variant beside it
    assert board["rank"].isna().all() and (board["n_unscored"] == 6).all()
