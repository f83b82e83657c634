"""Data files shipped with kbase (tag vocabulary, bilingual glossary, abbreviations, fitted fusion
weights), and the one way they are read.

Each YAML file that a search reads has a JSON twin (`<name>.json`: the parsed data and the
SHA-256 of the YAML it was made from): importing PyYAML and parsing the glossary and the
abbreviation groups was ~0.1 s of every cold `kbase search` (issue #11). A twin is used only
while its digest matches the YAML beside it, so an edited YAML is read as YAML until
`python -m kbase.data` writes its twins again (tests/test_data_twins.py checks they are current).
"""

from __future__ import annotations

import hashlib
from importlib import resources
from typing import Any

TWINNED = (
    "abbreviations.yaml",
    "api_aliases.yaml",
    "fusion.yaml",
    "glossary.yaml",
    "vocab.yaml",
)


def _parse_yaml(text: str) -> Any:
    """libyaml's C parser when PyYAML has it: the pure-Python one took ~0.3 s of every cold
    search for the glossary alone; both build the same plain data."""
    import yaml

    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506


def _twin_name(name: str) -> str:
    return name.rsplit(".", 1)[0] + ".json"


def read_yaml(name: str) -> Any:
    """kbase/data/<name>, parsed (from its JSON twin when that is current). FileNotFoundError
    when the file is absent."""
    here = resources.files(__name__)
    raw = here.joinpath(name).read_bytes()
    if name in TWINNED:
        try:
            import orjson

            twin = orjson.loads(here.joinpath(_twin_name(name)).read_bytes())
            if twin.get("sha256") == hashlib.sha256(raw).hexdigest():
                return twin["data"]
        except (OSError, ValueError, AttributeError):
            pass
    return _parse_yaml(raw.decode("utf-8"))


def write_twins() -> list[str]:
    """(Re)write the JSON twin of every file in TWINNED; returns the twins written. A file whose
    data JSON cannot carry exactly (dates, non-string keys) is refused."""
    import json
    from pathlib import Path

    folder = Path(__file__).parent
    out = []
    for name in TWINNED:
        raw = (folder / name).read_bytes()
        data = _parse_yaml(raw.decode("utf-8"))
        if json.loads(json.dumps(data)) != data:
            raise ValueError(f"{name}: its data does not survive JSON; leave it out of TWINNED")
        twin = {"sha256": hashlib.sha256(raw).hexdigest(), "data": data}
        text = json.dumps(twin, ensure_ascii=False, separators=(",", ":")) + "\n"
        (folder / _twin_name(name)).write_text(text, encoding="utf-8")
        out.append(_twin_name(name))
    return out
