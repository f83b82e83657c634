"""Library API names in a question, mapped to the concepts they stand for (kbase/data/
api_aliases.yaml, issue #25): "flash_attn_varlen_func returns NaN" also searches for packed
variable-length sequences, so the failure decides the rank rather than which skill names the API.
The same file's symptom cues add a cause's words to phrasings that imply it ("fine when the dims
are divisible by 64" -> a missing tail mask)."""

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
            # A CamelCase class name (RMSNorm) matches only as written, so the plain word
            # "rmsnorm" stays a word; snake_case and dotted names match in any case.
            name = str(name).strip()
            name = name if any(c.isupper() for c in name) else name.lower()
            if name.endswith("*"):
                prefixes.append((name[:-1], concepts))
            else:
                exact[name] = concepts
    return exact, prefixes


@functools.cache
def cues() -> list[tuple[re.Pattern[str], str]]:
    try:
        data = read_yaml("api_aliases.yaml") or {}
    except FileNotFoundError:
        return []
    return [(re.compile(c["pattern"], re.I), str(c["concepts"])) for c in data.get("cues", [])]


def concepts_for(text: str) -> list[str]:
    """The concept phrases of every API name and symptom cue in `text`, each once."""
    exact, prefixes = table()
    out: list[str] = [c for rx, c in cues() if rx.search(text)]
    for ident in _IDENT.findall(text):
        parts = ident.split(".")
        tails = [".".join(parts[i:]) for i in range(len(parts))]
        forms = tails + [f.lower() for f in tails]
        hit = next((exact[f] for f in forms if f in exact), None)
        if hit is None:
            hit = next((c for p, c in prefixes if any(f.startswith(p) for f in forms)), None)
        if hit is not None and hit not in out:
            out.append(hit)
    return out
