"""Build the GAIA-format sample set from its readable source.

    .venv/bin/python scripts/make_gaia_sample.py [--source data/gaia_sample/source.yaml] [--out data/gaia_sample]

Writes <out>/2023/<split>/metadata.parquet for each split in the source, and each question's attachment as
<task_id>.<ext> beside it, in the schema of the Hugging Face dataset gaia-benchmark/GAIA. The output is
deterministic (task ids are UUIDs derived from the slugs), so re-running it changes nothing unless the
source changed. Both the source and the output are committed.
"""
from __future__ import annotations

import argparse
import sys
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import yaml

ROOT = Path(__file__).resolve().parents[1]
NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/evalpipe/gaia_sample")
YEAR = "2023"

# The GAIA columns, in their order; `Annotator Metadata` is a struct of strings there too.
ANNOTATOR_FIELDS = ["Steps", "Number of steps", "How long did this take?", "Tools", "Number of tools"]
SCHEMA = pa.schema([
    ("task_id", pa.string()),
    ("Question", pa.string()),
    ("Level", pa.int64()),
    ("Final answer", pa.string()),
    ("file_name", pa.string()),
    ("Annotator Metadata", pa.struct([(f, pa.string()) for f in ANNOTATOR_FIELDS])),
])


def task_id(slug: str) -> str:
    return str(uuid.uuid5(NAMESPACE, slug))


def build_split(items: list[dict], folder: Path) -> int:
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.iterdir():  # attachments of removed questions must not linger
        if old.is_file():
            old.unlink()
    rows, slugs = [], set()
    for item in items:
        slug = item["slug"]
        if slug in slugs:
            sys.exit(f"duplicate slug {slug!r}")
        slugs.add(slug)
        if int(item["level"]) not in (1, 2, 3):
            sys.exit(f"{slug}: level must be 1, 2 or 3")
        tid = task_id(slug)
        file_name = ""
        if item.get("attachment"):
            att = item["attachment"]
            file_name = f"{tid}.{att['ext']}"
            (folder / file_name).write_text(att["content"], encoding="utf-8", newline="\n")
        steps = item.get("steps") or []
        tools = item.get("tools") or []
        real_tools = [t for t in tools if t != "none"]
        rows.append({
            "task_id": tid,
            "Question": " ".join(str(item["question"]).split()),
            "Level": int(item["level"]),
            "Final answer": str(item["answer"]),
            "file_name": file_name,
            "Annotator Metadata": {
                "Steps": "\n".join(f"{i}. {s}" for i, s in enumerate(steps, 1)),
                "Number of steps": str(len(steps)),
                "How long did this take?": f"{item.get('minutes', 2 + len(steps))} minutes",
                "Tools": "\n".join(f"{i}. {t}" for i, t in enumerate(tools, 1)),
                "Number of tools": str(len(real_tools)),
            },
        })
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    pq.write_table(table, folder / "metadata.parquet")
    return len(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", type=Path, default=ROOT / "data/gaia_sample/source.yaml")
    ap.add_argument("--out", type=Path, default=ROOT / "data/gaia_sample")
    args = ap.parse_args(argv)
    source = yaml.safe_load(args.source.read_text(encoding="utf-8"))
    for split, items in source.items():
        n = build_split(items, args.out / YEAR / split)
        print(f"{split}: {n} questions -> {args.out / YEAR / split / 'metadata.parquet'}")


if __name__ == "__main__":
    main()
