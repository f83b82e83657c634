"""Issue #24: `kill -9` of `kbase index` in the middle of a re-index leaves no process behind, the
generation it was replacing keeps answering, and the next `kbase index` publishes the new one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import TOPICS, write_skill
from procs import kill9_when, left_in_session

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike".split()


def _kbase(root: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kbase.cli", *args, "--root", str(root)],
        capture_output=True,
        text=True,
        **kw,
    )


def _top(root: Path, query: str) -> str:
    out = _kbase(root, "search", query, "--json", "-k", "1")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["hits"][0]["id"]


def test_a_killed_index_leaves_no_process_and_the_old_generation_answers(kb_root, tmp_path):
    for name, (desc, trig, body) in TOPICS.items():
        write_skill(kb_root, name, description=desc, trigger=trig, body=body)
    assert _kbase(kb_root, "index").returncode == 0
    assert _top(kb_root, "warp reduction gives wrong sum") == "warp-shuffle-sum"

    # enough new text that embedding it takes seconds: the kill lands while it runs
    for i in range(150):
        words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40))
        write_skill(
            kb_root,
            f"filler-{i:03d}",
            description=f"Filler skill number {i} about {words}.",
            trigger=f"filler symptom {i} {words[:60]}",
            body=f"Paragraph {i}. " + words * 4,
        )
    log = tmp_path / "index.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kbase.cli", "index", "--root", str(kb_root)],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            start_new_session=True,
        )
        kill9_when(proc, lambda: b"embed" in log.read_bytes(), "index", timeout_s=120)
    assert left_in_session(proc.pid) == []
    # the generation being replaced still answers, and knows nothing of the half-built one
    assert _top(kb_root, "warp reduction gives wrong sum") == "warp-shuffle-sum"

    again = _kbase(kb_root, "index", "--json")
    assert again.returncode == 0, again.stderr
    assert _top(kb_root, "Filler skill number 123") == "filler-123"
    assert _top(kb_root, "warp reduction gives wrong sum") == "warp-shuffle-sum"
