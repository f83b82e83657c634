"""A digest of the source of some modules and packaged data files: caches keyed by it (parsed
entries, BM25 tokens, mined cards) miss as soon as the code that made their contents changes.
Modules are found, not imported, so checking a cache costs no import."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from importlib.util import find_spec
from pathlib import Path


def module_files(name: str) -> list[str]:
    """The source files of module `name`: its file or, for a package (kbase.schema), every
    module of it, sorted; [] when it is not found."""
    spec = find_spec(name)
    if spec is None or spec.origin is None:
        return []
    if spec.submodule_search_locations:  # a package's code is its modules too, not __init__ only
        locs = spec.submodule_search_locations
        return sorted(str(p) for loc in locs for p in Path(loc).glob("*.py"))
    return [spec.origin]


def source_digest(
    modules: Iterable[str], data: Iterable[str] = (), prefix: str = "", length: int = 16
) -> str:
    """sha256 over `prefix`, each module's source (`name=none;` for one not found) and each
    file of kbase.data named in `data`, cut to `length` hex digits."""
    h = hashlib.sha256(prefix.encode())
    for name in modules:
        files = module_files(name)
        if not files:
            h.update(f"{name}=none;".encode())
        for path in files:
            with open(path, "rb") as fh:
                h.update(fh.read())
    if data:
        from importlib import resources

        for name in data:
            h.update(resources.files("kbase.data").joinpath(name).read_bytes())
    return h.hexdigest()[:length]
