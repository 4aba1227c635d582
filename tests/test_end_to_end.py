import pandas as pd

from evalpipe.project import load_config
from evalpipe.store.warehouse import Warehouse


def test_evaluate_the_graph_and_rank_the_leaderboard(instance, home):
    from eval_assets.launch import evaluate

    cfg = load_config()
    result = evaluate(cfg, ["smoke/test"], ["perfect", "parrot", "fixed"], instance=instance)
    assert result.success, result
    wh = Warehouse(home / "warehouse.duckdb")
    board = wh.query("select model, value, rank, n from leaderboard order by rank, model")
    assert board.to_dict("records") == [
        {"model": "perfect", "value": 1.0, "rank": 1, "n": 8},
        {"model": "fixed", "value": 0.125, "rank": 2, "n": 8},
        {"model": "parrot", "value": 0.0, "rank": 3, "n": 8},
    ]
    sliced = wh.query("select slice, value, n from metrics where model = 'fixed' order by slice")
    assert sliced.to_dict("records")[0] == {"slice": "all", "value": 0.125, "n": 8}
    assert {"category=geography", "category=arithmetic"} <= set(sliced["slice"])
    samples = wh.query("select benchmark_split, model, sample_id from rollouts")
    assert len(samples) == 24 and set(samples["model"]) == {"perfect", "parrot", "fixed"}
    j = wh.query("select * from judgements where model = 'fixed' and sample_id = 's1'")
    assert j.loc[0, "score"] == 1.0 and j.loc[0, "metric"] == "exact_match"
    # materializations are recorded on the real instance, with metadata for the UI
    from dagster import AssetKey
    ev = instance.get_latest_materialization_event(AssetKey("metrics"))
    assert "exact_match" in ev.asset_materialization.metadata


def test_rematerializing_a_partition_does_not_duplicate(instance, home):
    from eval_assets.launch import evaluate

    cfg = load_config()
    evaluate(cfg, ["smoke/extra"], ["perfect"], instance=instance)
    evaluate(cfg, ["smoke/extra"], ["perfect"], instance=instance)
    n = Warehouse(home / "warehouse.duckdb").query("select count(*) as n from rollouts")["n"][0]
    assert n == 4
