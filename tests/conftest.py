"""Shared fixtures. The embedding model loads once per test session (get_embedder caches it)."""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"

# Session fixtures (serve tests, shared histories), visible to every test module without an import.
from history_fixtures import histories, skills_index  # noqa: E402, F401
from serve_fixtures import chroma_server, indexed_root, service  # noqa: E402, F401

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("ANONYMIZED_TELEMETRY", "False")


# Tests that share a costly session fixture run in one pytest-xdist worker (--dist loadgroup,
# set in pyproject.toml), so the fixture is built once per run rather than once per worker.
XDIST_GROUPS = {
    "skills_index": "kb-index",
    "histories": "kb-index",
    "indexed_root": "serve",
    "service": "serve",
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks
def pytest_collection_modifyitems(config, items):
    for item in items:
        names = getattr(item, "fixturenames", ())
        group = next((g for f, g in XDIST_GROUPS.items() if f in names), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@dataclass
class CliRun:
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: dict[str, str] | None = None, cwd: Path | str | None = None) -> CliRun:
    """`kbase ARGS` in this process through typer's CliRunner: the same exit code, stdout and
    stderr as a subprocess, without a Python start-up per call. Tests where the process itself is
    the point (signals, blocked imports, import weight) still spawn one."""
    from typer.testing import CliRunner

    from kbase.cli import app

    before = os.getcwd()
    if cwd is not None:
        os.chdir(cwd)
    try:
        res = CliRunner().invoke(app, [str(a) for a in args], env=env)
    finally:
        os.chdir(before)
    if res.exception is not None and not isinstance(res.exception, SystemExit):
        raise res.exception  # a traceback, which a user would have seen: fail with it
    return CliRun(res.exit_code, res.stdout, res.stderr)


# Runs `kbase ARGS` in this interpreter and reports on stderr every module that was imported,
# for the tests of what a start-up or a base install loads.
MODULES_DRIVER = """
import json, sys
from kbase.cli import main
sys.argv = ["kbase", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    code = e.code
else:
    code = 0
sys.stderr.write("\\nLOADED " + json.dumps(sorted(sys.modules)) + "\\n")
sys.exit(code)
"""


def modules_loaded(stderr: str) -> set[str]:
    """The modules a MODULES_DRIVER run reported."""
    line = [x for x in stderr.splitlines() if x.startswith("LOADED ")][-1]
    return set(json.loads(line[len("LOADED ") :]))


@pytest.fixture(scope="session")
def embedder():
    from kbase.retrieval.embed import get_embedder

    from kbase.config import default_model_path

    return get_embedder(default_model_path())


def skill_text(
    name: str,
    *,
    description: str = "A test skill about warp shuffles.",
    trigger: str = "warp reduction gives wrong sum",
    extra: str = "",
    body: str = "",
) -> str:
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

{body or "Because lanes must agree on the mask."}

## Verification

```python verify
assert 1 + 1 == 2
```
"""


def snippet_skill(root: Path, name: str, code: str, timeout: int = 30) -> Path:
    """root/skills/NAME/SKILL.md: the least valid skill around a snippet, audited today, checked
    on cpu-interpret (for tests of runs, the sandbox and the ledger)."""
    import datetime as dt

    path = root / "skills" / name / "SKILL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        f"""---
name: {name}
description: A fixture skill around a snippet.
trigger: ["fixture"]
steps: ["run the snippet"]
failure_modes: [{{symptom: "-", cause: "-", fix: "-"}}]
verification: {{tiers: [cpu-interpret], timeout_s: {timeout}, asserts: "the snippet runs"}}
audit: {{date: {dt.date.today().isoformat()}}}
---
# {name}

```python verify
{code}
```
"""
    )
    return path


def write_skill(root: Path, name: str, text: str | None = None, **kw) -> Path:
    d = root / "skills" / name
    d.mkdir(parents=True, exist_ok=True)
    f = d / "SKILL.md"
    f.write_text(text if text is not None else skill_text(name, **kw), encoding="utf-8")
    return f


# Four small skills on distinct topics, for index/search tests.
TOPICS = {
    "warp-shuffle-sum": (
        "Reduce within a warp with __shfl_down_sync and a full 0xffffffff mask.",
        "warp reduction gives wrong sum",
        "Lanes exchange registers with shfl.sync.down.",
    ),
    "smem-bank-padding": (
        "Pad shared-memory tiles to tile[32][33] so a transpose has no bank conflicts.",
        "transpose kernel slow, shared memory bank conflicts",
        "32 banks of 4 bytes; stride 33 spreads columns.",
    ),
    "tl-dot-tf32": (
        "fp32 tl.dot uses TF32 tensor cores unless input_precision='ieee' is passed.",
        "fp32 matmul in triton has 1e-3 relative error",
        "TF32 keeps 10 mantissa bits.",
    ),
    "int64-offsets": (
        "Use int64 offsets when tensors exceed 2**31 elements.",
        "illegal memory access on a tensor with more than 2**31 elements",
        "pid * BLOCK wraps in int32.",
    ),
}


def pr_entry(repo: str, n: int, title: str, content_hash: str, text: str | None = None, **kw):
    """A PR Entry with one summary chunk, as extra_entries for build_index (kw: tags, date)."""
    from kbase.schema import Chunk, Entry

    eid, path = f"pr:{repo}#{n}", f"pr_archive/{repo}/{n}.md"
    chunk = Chunk(
        id=f"{eid}::0",
        entry_id=eid,
        kind="pr",
        section="summary",
        text=title if text is None else text,
        line=1,
        path=path,
    )
    return Entry(
        id=eid,
        kind="pr",
        title=title,
        path=path,
        content_hash=content_hash,
        chunks=[chunk],
        repo=repo,
        pr=n,
        **kw,
    )


def write_topic_skills(root: Path) -> None:
    for name, (desc, trig, body) in TOPICS.items():
        write_skill(root, name, description=desc, trigger=trig, body=body)


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
