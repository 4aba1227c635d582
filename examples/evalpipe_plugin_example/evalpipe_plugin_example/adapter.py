"""`adapter: inline_qa`: samples written in the config itself, under `options.items` (question/answer pairs)."""
from __future__ import annotations

from typing import Iterable

from evalpipe.benchmarks import Adapter
from evalpipe.core.errors import ConfigError
from evalpipe.core.types import Sample


class InlineQAAdapter(Adapter):
    """Question/answer pairs written in the config (`options.items: [{q: ..., a: ...}]`); no data file."""

    name = "inline_qa"
    default_metrics = ["contains_answer"]
    # the options it takes (besides those every split takes): `evalpipe validate` refuses any other, with a
    # "did you mean"; without a declaration they would be passed on unchecked (docs/config.md#declaring-options)
    option_schema = {"items"}

    def load(self) -> Iterable[Sample]:
        items = self.options.get("items")
        if not isinstance(items, list) or not items:
            raise ConfigError(f"{self.split.key}: inline_qa needs options.items, a list of {{q: ..., a: ...}}")
        return [Sample(id=str(it.get("id", i)), input=str(it["q"]), target=str(it["a"]) if it.get("a") is not None else None)
                for i, it in enumerate(items)]
