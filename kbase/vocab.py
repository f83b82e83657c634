"""Tag vocabulary: canonical values and aliases, loaded once from kbase/data/vocab.yaml."""

from __future__ import annotations

import functools

from kbase.data import read_yaml


@functools.cache
def vocabulary() -> dict[str, dict]:
    raw = read_yaml("vocab.yaml")
    out: dict[str, dict] = {}
    for key, spec in raw.items():
        values = [str(v) for v in spec["values"]]
        aliases = {str(k).lower(): str(v) for k, v in (spec.get("aliases") or {}).items()}
        out[key] = {"values": values, "set": set(values), "aliases": aliases}
    return out


def canonical_value(key: str, value: str) -> str | None:
    """The canonical spelling of `value` under `key`, or None when it is not in the vocabulary."""
    spec = vocabulary().get(key)
    if spec is None:
        return None
    v = str(value).strip()
    if v in spec["set"]:
        return v
    low = v.lower()
    if low in spec["set"]:
        return low
    return spec["aliases"].get(low)


def canonicalize(key: str, values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        c = canonical_value(key, v)
        if c is None:
            known = ", ".join(vocabulary()[key]["values"])
            raise ValueError(
                f"unknown {key} tag {v!r} (known: {known}; aliases in kbase/data/vocab.yaml)"
            )
        if c not in out:
            out.append(c)
    return out
