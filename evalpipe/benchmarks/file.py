"""Any dataset from a JSONL file, with a column mapping from the config."""
from __future__ import annotations

import json
from typing import Iterable

from evalpipe.benchmarks.base import Adapter, register_adapter
from evalpipe.errors import DataError
from evalpipe.types import Sample


@register_adapter("file")
class FileAdapter(Adapter):
    name = "file"

    def load(self) -> Iterable[Sample]:
        path = self.split.resolve(self.options["path"])
        cols = {"prompt": "prompt", "target": "target", "id": "id", **(self.options.get("columns") or {})}
        if not path.exists():
            raise DataError(f"dataset file {path} not found; fix 'path' for {self.split.key} in the config")
        samples = []
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh, 1):
                if not line.strip():
                    continue
                row = json.loads(line)
                meta = {k: v for k, v in row.items() if k not in cols.values()}
                target = row.get(cols["target"])
                samples.append(Sample(id=str(row.get(cols["id"], i - 1)), input=str(row[cols["prompt"]]),
                                      target=None if target is None else str(target), metadata=meta))
        return samples
