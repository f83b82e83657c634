"""Data files shipped with kbase (tag vocabulary, bilingual glossary, abbreviations, fitted fusion
weights), and the one way they are read."""

from __future__ import annotations

from typing import Any


def read_yaml(name: str) -> Any:
    """kbase/data/<name>, parsed by libyaml's C parser when PyYAML has it: the pure-Python one
    took ~0.3 s of every cold search for the glossary alone (issue #11); both build the same
    plain data. FileNotFoundError when the file is absent."""
    from importlib import resources

    import yaml

    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
