"""Secret searches: everything a run left under a folder, as text a planted secret can be looked for in."""
import json
import sqlite3
import zlib
from pathlib import Path

import pyarrow.parquet as pq


def inflated_sqlite(path: Path) -> str:
    """Every value of every table of a SQLite file, blobs inflated (Dagster zlib-compresses its event log)."""
    out = []
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        for (t,) in con.execute("select name from sqlite_master where type='table'").fetchall():
            for row in con.execute(f'select * from "{t}"'):
                for v in row:
                    if isinstance(v, bytes):
                        try:
                            v = zlib.decompress(v)
                        except zlib.error:
                            pass
                        v = v.decode("utf-8", "replace")
                    out.append(str(v))
        con.close()
    except sqlite3.DatabaseError:
        return ""
    return "\n".join(out)


def all_text(root: Path) -> dict[Path, str]:
    """Every file's content as text: raw bytes, plus Parquet read back and SQLite blobs inflated."""
    out = {}
    for f in root.rglob("*"):
        if not f.is_file():
            continue
        text = f.read_bytes().decode("utf-8", "replace")
        if f.suffix == ".parquet":
            text += json.dumps(pq.read_table(f).to_pylist(), default=str)
        elif f.suffix in (".db", ".sqlite"):
            text += inflated_sqlite(f)
        out[f] = text
    return out


def found(files: dict[Path, str], root: Path, secrets: dict[str, str]) -> list[tuple[str, str]]:
    """(file relative to root, secret's name) for each secret value found in each file's text."""
    return [(str(p.relative_to(root)), name) for p, text in files.items() for name, v in secrets.items() if v in text]
