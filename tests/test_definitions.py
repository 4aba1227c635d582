import subprocess
import sys
from pathlib import Path

from dagster import AssetKey

from eval_assets.definitions import defs

REPO = Path(__file__).parents[1]


def test_definitions_load_with_the_named_assets_and_resources():
    graph = defs.resolve_asset_graph()
    keys = {k.to_user_string() for k in graph.get_all_asset_keys()}
    assert keys == {"dataset", "prompts", "rollouts", "metric_settings", "judgements", "metrics", "leaderboard",
                    "pairwise", "reviews"}  # a judge's preferences; people's reviews (eval_assets/reviews.py)
    assert graph.get(AssetKey("metric_settings")).is_observable  # each split's metric settings (per partition)
    assert graph.get(AssetKey("rollouts")).parent_keys == {AssetKey("prompts")}
    assert graph.get(AssetKey("judgements")).parent_keys == {AssetKey("prompts"), AssetKey("rollouts"),
                                                             AssetKey("metric_settings")}
    assert graph.get(AssetKey("leaderboard")).partitions_def is None
    dims = [d.name for d in graph.get(AssetKey("metrics")).partitions_def.partitions_defs]
    assert dims == ["benchmark_split", "model"]
    assert {"model_runner", "judge", "warehouse", "warehouse_io_manager", "eval_config"} <= set(defs.resources)
    assert "executor" not in defs.resources  # Dagster's own word


def test_dagster_validates_the_workspace(home):
    out = subprocess.run([sys.executable, "-m", "dagster", "definitions", "validate", "-w", "workspace.yaml"],
                         cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_loading_the_code_location_writes_nothing_to_the_instance(instance):
    from partitions import MODEL

    assert instance.get_dynamic_partitions(MODEL) == []
