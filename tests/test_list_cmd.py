"""`evalpipe list` (issue 22): a JSONL set's header line is not counted as a sample before the first load, and
bracketed text in descriptions is shown as written (not read as rich markup)."""
import json

from tests.helpers.cli import cli_in_process


def test_list_counts_without_the_header_line_and_keeps_brackets(home, write_config, tmp_path, monkeypatch):
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"__header__": {"version": "1.0.0"}}) + "\n"
                    + "".join(json.dumps({"id": f"i{i}", "q": "?", "a": "x"}) + "\n" for i in range(3)) + "\n")
    write_config(f"""
benchmarks:
  da:
    adapter: file
    description: "answers as @name[value], [bold]kept[/bold]"
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo, description: "says [x]"}}
""")
    cli = cli_in_process(monkeypatch)
    b = json.loads(cli("list", "--format", "json").output)["benchmarks"][0]
    assert b["samples"] == 3
    table = cli("list").output
    assert "answers as @name[value], [bold]kept[/bold]" in table and "says [x]" in table
    assert " 3 " in table.splitlines()[2]


# ---- the list cache (issue 31): what a repeated `list` remembers is keyed on what it read ---------------------------
import os  # noqa: E402
import random  # noqa: E402
import shutil  # noqa: E402
import string  # noqa: E402
import time  # noqa: E402

ONE_SPLIT = """
benchmarks:
  da:
    adapter: file
    splits: {{extra: {{path: {data}}}}}
    options: {{columns: {{prompt: q, target: a, id: id}}}}
    metrics: [exact_match]
models:
  parrot: {{runner: echo}}
"""


def _lines(n: int, pad: str = "") -> str:
    return "".join(json.dumps({"id": f"i{i}", "q": "?", "a": "x"}) + "\n" for i in range(n)) + pad


def _age(path, seconds: float) -> None:
    """Set a file's mtime `seconds` in the past (old enough to be remembered; see listing.RACY_S)."""
    t = time.time() - seconds
    os.utime(path, (t, t))


def _samples(cli) -> int:
    return json.loads(cli("list", "--format", "json").output)["benchmarks"][0]["samples"]


def test_a_changed_dataset_file_shows_its_new_count(home, write_config, tmp_path, monkeypatch):
    data = tmp_path / "items.jsonl"
    data.write_text(_lines(3, pad=" \n" * 20))
    _age(data, 100)
    write_config(ONE_SPLIT.format(data=data))
    cli = cli_in_process(monkeypatch)
    assert _samples(cli) == 3
    cache = json.loads((home / "cache" / "list.json").read_text())
    assert list(cache["samples"].values()) == [3] and len(cache["checked"]) == 1  # remembered
    assert _samples(cli) == 3  # read from the cache
    # the same size, another count: the file's mtime (and here its inode) says it changed
    new = _lines(4)
    new += " " * (data.stat().st_size - len(new) - 1) + "\n"
    assert len(new) == data.stat().st_size
    data.write_text(new)
    _age(data, 50)
    assert _samples(cli) == 4
    # written just now (within the timestamp granularity of a second write): counted, not remembered
    data.write_text(_lines(6))
    assert _samples(cli) == 6
    data.write_text(_lines(2))
    assert _samples(cli) == 2


def test_a_changed_file_in_a_dataset_folder_shows_the_new_count(home, write_config, tmp_path, monkeypatch):
    """A folder in an adapter's own layout (GAIA's): any file under it changed is a new count."""
    import pyarrow.parquet as pq

    from tests.helpers.cli import REPO

    folder = tmp_path / "gaia"
    shutil.copytree(REPO / "data" / "gaia_sample", folder)
    meta = folder / "2023" / "validation" / "metadata.parquet"
    for p in folder.rglob("*"):
        _age(p, 100)
    write_config(f"""
benchmarks:
  gaia: {{adapter: gaia, splits: [validation], options: {{path: {folder}}}}}
models:
  parrot: {{runner: echo}}
""")
    cli = cli_in_process(monkeypatch)
    assert _samples(cli) == 29
    assert _samples(cli) == 29
    table = pq.read_table(meta)
    pq.write_table(table.slice(0, 20), meta)
    _age(meta, 50)
    assert _samples(cli) == 20


def test_warehouse_counts_follow_the_datasets_partitions(home, write_config, tmp_path, monkeypatch):
    """A split loaded into the warehouse shows the loaded count; a new load of it shows the new one."""
    import pandas as pd

    from evalpipe.core.config import warehouse_path
    from evalpipe.store.warehouse import Warehouse

    data = tmp_path / "items.jsonl"
    data.write_text(_lines(3))
    write_config(ONE_SPLIT.format(data=data))
    wh = Warehouse(warehouse_path())

    def load(n: int, age: float) -> None:
        df = pd.DataFrame({"benchmark_split": ["da/extra"] * n, "sample_id": [f"s{i}" for i in range(n)],
                           "sample_index": list(range(n)), "input": ["?"] * n, "target": ["x"] * n})
        wh.write("datasets", df, {"benchmark_split": "da/extra"})
        for f in wh.table_dir("datasets").rglob("*"):  # (the partition and the table's schema file)
            _age(f, age)

    cli = cli_in_process(monkeypatch)
    load(7, 100)
    assert _samples(cli) == 7
    assert _samples(cli) == 7
    assert json.loads((home / "cache" / "list.json").read_text())["loaded"]  # remembered
    load(9, 50)
    assert _samples(cli) == 9


def test_a_config_that_passed_and_then_breaks_is_still_reported(home, write_config, tmp_path, monkeypatch):
    data = tmp_path / "items.jsonl"
    data.write_text(_lines(3))
    path = write_config(ONE_SPLIT.format(data=data))
    cli = cli_in_process(monkeypatch)
    assert cli("list").exit_code == 0
    assert cli("list").exit_code == 0  # from the cache
    path.write_text(ONE_SPLIT.format(data=data).replace("adapter: file", "adapter: fiel"))
    _age(path, 10)  # (another mtime: the in-process config cache of load_config is keyed on it)
    result = invoke_catching("list")
    assert result.exit_code == 2, result.output
    err = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(err) == 1 and "unknown adapter 'fiel'" in err[0] and "did you mean 'file'" in err[0], result.output
    assert result.output.count("\n") == 1  # one line, as before the cache


def invoke_catching(*args: str):
    from click.testing import CliRunner

    from evalpipe.cli.main import main

    return CliRunner().invoke(main, list(args))


def test_what_the_check_depends_on_changes_its_fingerprint(tmp_path, monkeypatch):
    """The config's bytes, evalpipe's code, the import path and the EVALS_* environment each make a new key; a
    config with `plugins:` or a probed sandbox is checked every time."""
    from evalpipe.project import listing

    cfg = tmp_path / "evals.yaml"
    base = listing.check_fingerprint(cfg, b"models: {}")
    assert listing.check_fingerprint(cfg, b"models: {}") == base
    assert listing.check_fingerprint(cfg, b"models: {} ") != base
    assert listing.check_fingerprint(tmp_path / "other.yaml", b"models: {}") != base
    monkeypatch.setenv("EVALS_SOMETHING", "1")
    assert listing.check_fingerprint(cfg, b"models: {}") != base
    monkeypatch.delenv("EVALS_SOMETHING")
    monkeypatch.setattr(listing, "_CODE", "another version of the code")
    assert listing.check_fingerprint(cfg, b"models: {}") != base
    monkeypatch.undo()
    monkeypatch.setattr("sys.path", [*__import__("sys").path, str(tmp_path)])
    assert listing.check_fingerprint(cfg, b"models: {}") != base
    assert listing._checked_every_time({"plugins": ["my_plugin"]})
    assert listing._checked_every_time({"sandbox": "docker"}) and not listing._checked_every_time({"sandbox": "auto"})


def test_a_config_with_plugins_is_never_remembered(home, write_config, tmp_path, monkeypatch):
    (tmp_path / "listplug.py").write_text("X = 1\n")
    data = tmp_path / "items.jsonl"
    data.write_text(_lines(3))
    write_config(ONE_SPLIT.format(data=data) + "plugins: [listplug]\n")
    cli = cli_in_process(monkeypatch)
    _age(data, 100)
    assert _samples(cli) == 3
    assert json.loads((home / "cache" / "list.json").read_text())["checked"] == {}  # (the count is remembered)


# ---- tables without rich: the same text -----------------------------------------------------------------------------
def test_plain_tables_are_the_ones_rich_draws():
    from evalpipe.cli.view import _plain_table, _rich_table

    rnd = random.Random(7)
    alphabet = string.ascii_letters + string.digits + "  []:/@.-_=*#`'\"\\{}()<>|~!?,;%&^$+"
    drawn = 0
    for _ in range(1500):
        ncols, nrows = rnd.randint(1, 6), rnd.randint(1, 5)

        def text() -> str:
            return "".join(rnd.choice(alphabet) for _ in range(rnd.choice([0, 1, 3, 12, 40])))

        header = [text() or "h" for _ in range(ncols)]
        rows = [[text() for _ in range(ncols)] for _ in range(nrows)]
        right = [rnd.random() < 0.4 for _ in range(ncols)]
        width = rnd.choice([100_000, 120, 80, 40, 20])
        plain = _plain_table(header, rows, right, width)
        if plain is not None:
            drawn += 1
            assert plain == _rich_table(header, rows, right, width), (header, rows, right, width)
    assert drawn > 300
    # what it leaves to rich: wide or non-ASCII text, line breaks, a header rich reads as markup, a table to wrap
    for header, rows in ((["a"], [["naïve"]]), (["a"], [["x\ny"]]), (["a[b]"], [["x"]]), (["a"], [[" x"]])):
        assert _plain_table(header, rows, [False], 100_000) is None
    assert _plain_table(["a", "b"], [["x" * 10, "y" * 10]], [False, False], 22) is not None
    assert _plain_table(["a", "b"], [["x" * 10, "y" * 10]], [False, False], 21) is None


def test_options_that_json_cannot_key_are_counted_unremembered(tmp_path):
    from evalpipe.core.config import SplitConfig
    from evalpipe.project.listing import ListCache, cached_count

    data = tmp_path / "items.jsonl"
    data.write_text(_lines(4))
    _age(data, 100)
    split = SplitConfig(key="da/extra", benchmark="da", split="extra", adapter="file",
                        options={"path": str(data), "columns": {1: "q", "prompt": "q"}}, metrics=None,
                        prompt_template=None, base_dir=tmp_path)
    cache = ListCache(None)
    assert cached_count(split, cache) == 4 and cache.data["samples"] == {}


def test_a_config_rewritten_during_its_check_is_not_remembered(home, write_config, tmp_path, monkeypatch):
    """The fingerprint is of the bytes read first; if the file the check read was another one, nothing is kept."""
    from evalpipe.project import listing, loader

    data = tmp_path / "items.jsonl"
    data.write_text(_lines(3))
    path = write_config(ONE_SPLIT.format(data=data))
    real = loader.load_config

    def rewritten(p):
        path.write_text(ONE_SPLIT.format(data=data) + "# edited\n")
        return real(p)

    monkeypatch.setattr(loader, "load_config", rewritten)
    cache = listing.ListCache(None)
    _, metrics, remember = listing.checked_config(path, cache)
    assert metrics is None and remember is None
