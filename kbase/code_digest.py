"""A digest of the source of some modules and packaged data files: caches keyed by it (parsed
entries, BM25 tokens, mined cards) miss as soon as the code that made their contents changes.
Modules are found, not imported, so checking a cache costs no import."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from importlib import resources
from importlib.util import find_spec


def source_digest(
    modules: Iterable[str], data: Iterable[str] = (), prefix: str = "", length: int = 16
) -> str:
    """sha256 over `prefix`, each module's source (`name=none;` for one not found) and each
    file of kbase.data named in `data`, cut to `length` hex digits."""
    h = hashlib.sha256(prefix.encode())
    for name in modules:
        spec = find_spec(name)
        if spec is None or spec.origin is None:
            h.update(f"{name}=none;".encode())
            continue
        with open(spec.origin, "rb") as fh:
            h.update(fh.read())
    for name in data:
        h.update(resources.files("kbase.data").joinpath(name).read_bytes())
    return h.hexdigest()[:length]
