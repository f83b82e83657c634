"""Data files shipped with kbase (tag vocabulary, bilingual glossary, abbreviations, fitted fusion
weights), and the one way they are read.

They are read with libyaml's C parser when PyYAML has it: the pure-Python one took ~0.3 s of
every cold search for the glossary alone."""

from __future__ import annotations

from importlib import resources
from typing import Any


def read_yaml(name: str) -> Any:
    """kbase/data/<name>, parsed. FileNotFoundError when the file is absent."""
    import yaml

    text = resources.files(__name__).joinpath(name).read_text(encoding="utf-8")
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
