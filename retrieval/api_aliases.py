"""Library API names in a question, mapped to the concepts they stand for (kbase/data/
api_aliases.yaml, issue #25): "flash_attn_varlen_func returns NaN" also searches for packed
variable-length sequences, so the failure decides the rank rather than which skill names the API."""

from __future__ import annotations

import functools
import re

from kbase.data import read_yaml

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@functools.cache
def table() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(lower-case name -> concepts, [(lower-case prefix, concepts)] for names ending in *)."""
    try:
        data = read_yaml("api_aliases.yaml") or {}
    except FileNotFoundError:
        return {}, []
    exact: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for item in data.get("aliases", []):
        concepts = str(item["concepts"]).strip()
        for name in item["names"]:
            name = str(name).strip().lower()
            if name.endswith("*"):
                prefixes.append((name[:-1], concepts))
            else:
                exact[name] = concepts
    return exact, prefixes


def concepts_for(text: str) -> list[str]:
    """The concept phrases of every API name in `text`, each once, in order of appearance."""
    exact, prefixes = table()
    out: list[str] = []
    for ident in _IDENT.findall(text):
        low = ident.lower()
        forms = [low]
        parts = low.split(".")
        forms += [".".join(parts[i:]) for i in range(1, len(parts))]
        hit = next((exact[f] for f in forms if f in exact), None)
        if hit is None:
            hit = next((c for p, c in prefixes if any(f.startswith(p) for f in forms)), None)
        if hit is not None and hit not in out:
            out.append(hit)
    return out
