"""JSON text as evalpipe stores it (warehouse JSON columns, journal records, artifact lines): what
`json.dumps(obj, ensure_ascii=False, default=str)` writes, without json's per-call set-up, and its fast reading.

`json.dumps` with options builds a `JSONEncoder`, whose `encode` builds a C encoder, on every call: a large share of
encoding a small value. Here both are built once. No cycle check: the values are rows of plain values and decoded
JSON, never cyclic. The text is the same byte for byte."""
from __future__ import annotations

import json
from typing import Any

ENCODER = json.JSONEncoder(ensure_ascii=False, default=str)
_c_encoder = (json.encoder.c_make_encoder(None, ENCODER.default, json.encoder.encode_basestring, None, ": ", ", ",
                                          False, False, True) if json.encoder.c_make_encoder else None)
encode_string = json.encoder.encode_basestring  # the JSON text of a str, as the encoder writes it
# (value, end) of the JSON value at the start of a text, without json.loads' Python layers (~2-4x faster on short
# texts); json.loads(s) is the same value when end == len(s)
raw_decode = json.JSONDecoder().raw_decode


def dumps(obj: Any) -> str:
    """`json.dumps(obj, ensure_ascii=False, default=str)`."""
    return "".join(_c_encoder(obj, 0)) if _c_encoder is not None else ENCODER.encode(obj)
