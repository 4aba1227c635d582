"""Partition keys: what Dagster accepts, made from user-supplied names."""
import re

# Dagster rejects '|', '[' and ']' in static keys but silently accepts them in dynamic ones; '|' also
# separates the dimensions of a multi-partition key. Keep a conservative set and map the rest to '-'.
_UNSAFE = re.compile(r"[^A-Za-z0-9._\-/@:+=]+")


def sanitize_key(name: str) -> str:
    """Turn a model id, checkpoint folder name or benchmark name into a valid partition key."""
    key = _UNSAFE.sub("-", str(name).strip()).strip("-")
    if not key:
        raise ValueError(f"cannot make a partition key from {name!r}: use letters, digits or ._-/@:+=")
    return key


def split_key(benchmark: str, split: str) -> str:
    return f"{sanitize_key(benchmark)}/{sanitize_key(split)}"


def folder_name(model_key: str) -> str:
    """A model key as one folder or file name (run artifacts, the models registry): a '/' (`org/model`) is spelled
    `__`. Two keys that differ only there (`a/b`, `a__b`) would share it, so neither the config nor the registry
    accepts such a pair."""
    return model_key.replace("/", "__")
