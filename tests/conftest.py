"""Shared fixtures. The embedding model loads once per test session (get_embedder caches it)."""
from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


@pytest.fixture(scope="session")
def embedder():
    from kbase.config import default_model_path
    from kbase.retrieval.embed import get_embedder

    return get_embedder(default_model_path())


def skill_text(name: str, *, description: str = "A test skill about warp shuffles.",
               trigger: str = "warp reduction gives wrong sum", extra: str = "", body: str = "") -> str:
    """A valid SKILL.md; `extra` is raw front-matter appended after the tags block."""
    return f"""---
name: {name}
description: {description}
trigger:
  - "{trigger}"
steps:
  - "Use a full mask."
failure_modes:
  - symptom: "wrong sum"
    cause: "partial mask"
    fix: "use 0xffffffff"
verification:
  tiers: [cpu-interpret]
  timeout_s: 60
  asserts: "the snippet exits 0"
audit:
  date: 2026-11-01
tags:
  languages: [python]
  kernel_types: [reduction]
{extra}---
# Title of {name}

## Why

{body or 'Because lanes must agree on the mask.'}

## Verification

```python verify
assert 1 + 1 == 2
```
"""


def write_skill(root: Path, name: str, text: str | None = None, **kw) -> Path:
    d = root / "skills" / name
    d.mkdir(parents=True, exist_ok=True)
    f = d / "SKILL.md"
    f.write_text(text if text is not None else skill_text(name, **kw), encoding="utf-8")
    return f


@pytest.fixture
def kb_root(tmp_path):
    root = tmp_path / "kb"
    (root / "skills").mkdir(parents=True)
    return root


@pytest.fixture(scope="session")
def real_skills_root(tmp_path_factory):
    """A copy of the shipped skills, so tests never write an index into the checkout."""
    root = tmp_path_factory.mktemp("realkb")
    shutil.copytree(REPO / "skills", root / "skills")
    return root
