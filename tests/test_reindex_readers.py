"""A reader process keeps answering filtered searches correctly while another process re-indexes,
and sees the new generation afterwards (issue #11: a server used to answer every filtered search
with 500 "Error finding id" after someone's `kbase index`). Embedded store, and a Chroma server
when CI runs one (KBASE_TEST_CHROMA_URL).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TOPICS, write_skill, write_topic_skills

SERVER = os.environ.get("KBASE_TEST_CHROMA_URL")
MODES = ["embedded"] + (["server"] if SERVER else [])

# The reader: loops over filtered searches until told to stop, checks every hit against its
# filter, then waits for the last generation and checks it sees the edit.
READER = r"""
import json, sys, time
from pathlib import Path
from kbase.api import KnowledgeBase

root, home, url, work = sys.argv[1], sys.argv[2], sys.argv[3] or None, Path(sys.argv[4])
kb = KnowledgeBase(root=root, home=home, chroma_url=url)
kb.warm_up()
queries = ["warp shuffle wrong sum", "bank conflict padding", "tf32 precision of tl.dot",
           "int32 offsets overflow", "quokka"]
checks = [
    ({"kind": "skill"}, lambda h: h.kind == "skill"),
    ({"kind": "skill", "tags": ["languages=python"]}, lambda h: h.kind == "skill"),
    ({"kind": "pr", "repo": "alpha"}, lambda h: h.kind == "pr" and h.repo == "alpha"),
    ({"kind": "pr"}, lambda h: h.kind == "pr"),
    ({}, lambda h: True),
]
errors, wrong, n = [], [], 0
(work / "ready").write_text("1")
while not (work / "stop").exists():
    for q in queries:
        for kw, ok in checks:
            try:
                hits = kb.search(q, k=5, **kw)
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")
                continue
            n += 1
            wrong.extend(f"{kw} -> {h.id}" for h in hits if not ok(h))
final = [h.id for h in kb.search("quokka zebrafish", k=3, kind="skill")]
dense = [h.id for h in kb.search("quokka zebrafish", k=3, kind="skill", mode="dense")]
prs = [h.id for h in kb.search("alpha change", k=20, kind="pr", repo="alpha")]
print(json.dumps({"errors": errors[:20], "n_errors": len(errors), "wrong": wrong[:20],
                  "searches": n, "final": final, "dense": dense, "prs": prs}))
"""


def _card(root: Path, repo: str, pr: int, title: str) -> None:
    d = root / "pr_archive" / repo
    d.mkdir(parents=True, exist_ok=True)
    (d / f"{pr}.md").write_text(
        f"""---
repo: {repo}
pr: {pr}
sha: "{pr:040d}"
date: "2025-0{1 + pr % 9}-01T00:00:00+00:00"
title: "{title}"
families: []
files:
- path: src/kernel_{pr}.cu
  added: 3
  deleted: 1
  symbols: [launch_{pr}]
totals: {{files: 1, added: 3, deleted: 1}}
categories: [fix]
tags: {{}}
---
## Summary

{title}.
""",
        encoding="utf-8",
    )


def _index(root: Path, home: Path, url: str | None) -> None:
    env = {**os.environ, "KBASE_HOME": str(home)}
    if url:
        env["KBASE_CHROMA_URL"] = url
    subprocess.run(
        [sys.executable, "-m", "kbase.cli", "index", "--root", str(root), "--json"],
        check=True,
        capture_output=True,
        env=env,
        timeout=600,
    )


@pytest.mark.parametrize("mode", MODES)
def test_reader_survives_reindex_by_another_process(mode, kb_root, tmp_path, embedder):
    url = SERVER if mode == "server" else None
    if url:
        os.environ["KBASE_CHROMA_COLLECTION"] = f"r{abs(hash(str(tmp_path))) % 10**10}"
    try:
        write_topic_skills(kb_root)
        for i in range(1, 7):
            _card(kb_root, "alpha" if i % 2 else "beta", i, f"alpha change number {i}")
        home = tmp_path / "home"
        _index(kb_root, home, url)
        work = tmp_path / "work"
        work.mkdir()
        reader = subprocess.Popen(
            [sys.executable, "-c", READER, str(kb_root), str(home), url or "", str(work)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 120
        while not (work / "ready").exists():
            assert reader.poll() is None, reader.communicate()
            assert time.time() < deadline, "reader never became ready"
            time.sleep(0.2)
        # Three re-indexes by another process: edit a skill, drop a card, add one, re-embed all.
        victim = sorted(TOPICS)[0]
        write_skill(kb_root, victim, body="A quokka zebrafish sentence nobody else has.")
        _index(kb_root, home, url)
        (kb_root / "pr_archive" / "alpha" / "1.md").unlink()
        _card(kb_root, "alpha", 9, "alpha change number 9")
        _index(kb_root, home, url)
        for name in sorted(TOPICS)[1:]:
            f = kb_root / "skills" / name / "SKILL.md"
            f.write_text(f.read_text() + "\n<!-- touched -->\n")
        _index(kb_root, home, url)
        time.sleep(1.0)
        (work / "stop").write_text("1")
        out, err = reader.communicate(timeout=120)
        assert reader.returncode == 0, err
        res = json.loads(out.strip().splitlines()[-1])
        assert res["n_errors"] == 0, res["errors"]
        assert not res["wrong"], res["wrong"]
        assert res["searches"] > 0
        assert res["final"][0] == victim and res["dense"][0] == victim
        assert "pr:alpha#9" in res["prs"] and "pr:alpha#1" not in res["prs"]
        assert all(p.startswith("pr:alpha#") for p in res["prs"])
    finally:
        os.environ.pop("KBASE_CHROMA_COLLECTION", None)
