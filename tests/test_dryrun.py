"""`evalpipe run --dry-run`: samples, estimated tokens and cost per partition from litellm's offline price map,
and nothing run: no Dagster run, no model call, nothing in the warehouse."""
import json

import pytest

import eval_assets.launch  # noqa: F401  the partitions are read at import: from the test config, not a test's own
from click.testing import CliRunner

CONFIG = """
benchmarks:
  smoke:
    adapter: file
    splits:
      test: {path: {repo}/data/smoke/test.jsonl}
    options:
      columns: {prompt: question, target: answer, id: id}
    metrics: [exact_match]
models:
  gpt:
    runner: litellm
    model: openai/gpt-4o-mini
    api_base: http://127.0.0.1:9/v1
    params: {max_tokens: 10}
  custom:
    runner: litellm
    model: openai/my-own-model
    api_base: http://127.0.0.1:9/v1
    params: {max_tokens: 5}
    options: {pricing: {input_cost_per_mtok: 1000000, output_cost_per_mtok: 2000000}}
  unpriced:
    runner: litellm
    model: openai/nobody-prices-this
    api_base: http://127.0.0.1:9/v1
  parrot:
    runner: echo
default_models: [gpt]
"""


def _prices(model: str) -> tuple[float, float]:
    from evalpipe.runners.pricing import cost_map

    e = cost_map()[model]
    return e["input_cost_per_token"], e["output_cost_per_token"]


def test_estimate_per_partition_and_total(home, write_config):
    from evalpipe.project import load_config
    from evalpipe.cli.dryrun import as_frame, estimate

    write_config(CONFIG)
    cfg = load_config()
    est = {e.model: e for e in estimate(cfg, ["smoke/test"], ["gpt", "custom", "unpriced", "parrot"])}
    assert all(e.samples == 8 and e.cached == 0 for e in est.values())
    # output: the max_tokens bound per sample, or the default when unset
    assert est["gpt"].output_tokens == 80 and est["custom"].output_tokens == 40
    assert est["unpriced"].output_tokens == 8 * 256
    # input: counted per prompt (each has the question and a chat overhead), the same for the same tokenizer
    assert 8 * 5 < est["gpt"].input_tokens < 8 * 200
    pin, pout = _prices("gpt-4o-mini")
    assert est["gpt"].cost_usd == pytest.approx(est["gpt"].input_tokens * pin + 80 * pout)
    # a price set on the model wins over the map: $1 per input token, $2 per output token
    assert est["custom"].cost_usd == pytest.approx(est["custom"].input_tokens * 1.0 + 40 * 2.0)
    assert est["unpriced"].cost_usd is None  # an API model with no price: unknown, not free
    assert est["parrot"].cost_usd == 0.0  # no API call at all
    table = as_frame(list(est.values()))
    total = table.iloc[-1]
    assert total["benchmark_split"] == "total" and total["samples"] == 32
    assert total["est_cost_usd"].endswith("+ unpriced")
    assert float(total["est_cost_usd"].split()[0]) == pytest.approx(est["gpt"].cost_usd + est["custom"].cost_usd,
                                                                     abs=1e-4)


def test_cli_dry_run_prints_the_table_and_runs_nothing(home, write_config):
    from evalpipe.cli.main import main

    write_config(CONFIG)
    res = CliRunner().invoke(main, ["run", "--model", "gpt", "--model", "parrot", "--limit", "3", "--dry-run",
                                    "--no-progress"])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert any("smoke/test" in ln and "gpt" in ln for ln in lines)
    assert any(ln.startswith("| total") for ln in lines), res.output
    assert "est_cost_usd" in res.output
    # nothing ran: no run in the instance, no warehouse, no journal
    assert not (home / "warehouse").exists() and not (home / "journal").exists()
    from dagster import DagsterInstance

    with DagsterInstance.get() as inst:
        assert inst.get_runs_count() == 0


def test_journaled_samples_are_counted_as_cached(home, write_config):
    """Samples already in the partition's journal (same fingerprint) would not be sent: left out of the cost."""
    from evalpipe.pipeline import stages as pipeline
    from evalpipe.project import load_config
    from evalpipe.cli.dryrun import estimate
    from evalpipe.store.journal import Journal
    from evalpipe.runners import build_runner

    write_config(CONFIG)
    cfg = load_config()
    split, model = cfg.split("smoke/test"), cfg.model("gpt")
    prompts = pipeline.build_prompts(split, "gpt", pipeline.build_dataset(split))
    reqs = pipeline.rollout_requests(build_runner(model), prompts)
    with Journal(pipeline.journal_path("rollouts", split.key, "gpt")) as j:
        for r in reqs[:3]:
            j.record(r.fingerprint, r.sample_id, {"sample_id": r.sample_id, "status": "ok", "raw_output": "x"})
    full = estimate(cfg, ["smoke/test"], ["custom"])[0]
    part = estimate(cfg, ["smoke/test"], ["gpt"])[0]
    assert part.cached == 3 and part.output_tokens == 5 * 10
    # a change of decoding params changes the fingerprint: nothing is cached any more
    other = estimate(cfg, ["smoke/test"], ["gpt"], params={"max_tokens": 11})[0]
    assert other.cached == 0 and other.output_tokens == 8 * 11
    assert full.cached == 0
    json.dumps([part.__dict__])  # plain values, printable as JSON


def test_backfill_dry_run_takes_dagster_partition_keys(home, write_config):
    from evalpipe.cli.main import main

    write_config(CONFIG)
    res = CliRunner().invoke(main, ["dry-run", "--partitions", "smoke/test|gpt,smoke/test|parrot"])
    assert res.exit_code == 0, res.output
    rows = [ln for ln in res.output.splitlines() if ln.startswith("| smoke/test")]
    assert len(rows) == 2 and "gpt" in rows[0] and "parrot" in rows[1]
    assert CliRunner().invoke(main, ["dry-run", "--all"]).exit_code == 0
    bad = CliRunner().invoke(main, ["dry-run", "--partitions", "smoke/test"])
    assert bad.exit_code == 2 and "split|model" in bad.output
