"""JSON for the index's large files (columns, vocabulary, vector ids, card signatures) through
orjson, which reads and writes them several times faster than the json module: decoding them
was a good part of a cold `kbase search` and of an incremental re-index (issue #11). The files
stay plain JSON; anything orjson refuses (a lone surrogate) goes through the json module."""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)  # what dumps wrote through json (escaped surrogates), or bad


def dumps(obj: Any) -> bytes:
    try:
        return orjson.dumps(obj)
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(obj).encode("ascii")
