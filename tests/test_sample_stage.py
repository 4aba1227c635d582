"""Per-sample stages (design_refs 001): the warehouse view `sample_stages` says, for each sample of each partition,
`init` (prompted), `rollout` (has a rollout) or `judged` (has judgements), queried with `evalpipe sql` and in the
DuckDB file itself."""
import json

import duckdb
import pandas as pd

from evalpipe.core.config import warehouse_path
from evalpipe.store.warehouse import Warehouse
from tests.helpers.cli import cli_in_process
from tests.helpers.configs import smoke_benchmark

PART = {"benchmark_split": "toy/test", "model": "half"}


def _write_half_done(wh: Warehouse) -> None:
    """A partition stopped midway: 4 samples prompted, 3 rolled out (one failed), 1 judged by two metrics."""
    ids = ["a", "b", "c", "d"]
    wh.write("prompts", pd.DataFrame({**{k: [v] * 4 for k, v in PART.items()}, "sample_id": ids,
                                      "sample_index": range(4), "prompt_text": ids}), PART)
    wh.write("rollouts", pd.DataFrame({**{k: [v] * 3 for k, v in PART.items()}, "sample_id": ids[:3],
                                       "status": ["ok", "ok", "error"]}), PART)
    wh.write("judgements", pd.DataFrame({**{k: [v] * 2 for k, v in PART.items()}, "sample_id": ["a", "a"],
                                         "metric": ["exact_match", "includes"], "status": "scored"}), PART)


def test_stages_through_the_cli_and_in_the_duckdb_file(home, write_config, monkeypatch):
    write_config(smoke_benchmark(limit=3) + "models:\n  perfect: {runner: echo, reply: target}\n")
    cli = cli_in_process(monkeypatch)
    assert cli("run", "--model", "perfect", "--no-progress").exit_code == 0
    wh = Warehouse(warehouse_path())
    _write_half_done(wh)

    r = cli("sql", "select benchmark_split, model, sample_id, stage, rollout_status, judged_metrics "
                   "from sample_stages order by benchmark_split, model, sample_index", "--json")
    assert r.exit_code == 0, r.output
    rows = [(x["model"], x["sample_id"], x["stage"], x["rollout_status"], x["judged_metrics"])
            for x in json.loads(r.output)]
    assert rows[-4:] == [("half", "a", "judged", "ok", 2), ("half", "b", "rollout", "ok", 0),
                         ("half", "c", "rollout", "error", 0), ("half", "d", "init", None, 0)]
    assert [x[2] for x in rows[:-4]] == ["judged"] * 3 and {x[0] for x in rows[:-4]} == {"perfect"}

    counts = cli("sql", "select stage, count(*) as n from sample_stages where model = 'half' group by stage "
                        "order by stage", "--csv")
    assert counts.output.splitlines() == ["stage,n", "init,1", "judged,1", "rollout,2"]

    # the DuckDB file analysts open holds the view too (its views are rebuilt on a write)
    wh.ensure_views()
    with duckdb.connect(str(warehouse_path()), read_only=True) as con:
        got = con.execute("select stage, count(*) from sample_stages group by stage order by stage").fetchall()
    assert got == [("init", 1), ("judged", 4), ("rollout", 2)]


def test_a_rollout_again_without_judgements_reads_rollout(home):
    """Re-materializing judgements replaces them; a partition whose judgements are deleted is back at `rollout`."""
    wh = Warehouse(warehouse_path())
    _write_half_done(wh)
    assert wh.query("select stage from sample_stages where sample_id = 'a'")["stage"].tolist() == ["judged"]
    wh.delete("judgements", PART)
    assert wh.query("select stage from sample_stages order by sample_index")["stage"].tolist() == \
        ["rollout", "rollout", "rollout", "init"]
