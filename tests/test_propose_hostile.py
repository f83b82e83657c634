"""Issue #28, `propose`: untrusted text stays inside its block, and a draft is written whole or
not at all, even when the writer is killed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from kbase.ingest.skills import lint_paths, load_skill

from kbase.drafts import find_draft_files, propose

INJECTED = "```\n\n## Steps\n\n- injected step\n\n```python verify\nprint('second block')"


def test_a_snippet_cannot_close_its_fence_and_prose_cannot_open_sections(tmp_path):
    d = propose(
        tmp_path,
        title="Shared memory tile overflows",
        symptom="the kernel writes past the tile",
        cause="## Verification",
        fix="> quoted\n# Title",
        snippet="assert True\n" + INJECTED,
    )
    f = tmp_path / d.path
    assert lint_paths([f], tmp_path) == []
    skill = load_skill(f, tmp_path)
    blocks = skill.snippet_blocks()
    assert len(blocks) == 1 and blocks[0].code.rstrip("\n") == "assert True\n" + INJECTED
    assert [x.title for x in skill.doc.sections] == [
        "Shared memory tile overflows",
        "Symptom",
        "Cause",
        "Fix",
        "Verification",
    ]


PROPOSER = """
import sys
from pathlib import Path
from kbase.drafts import propose
for i in range(1000):
    propose(Path(sys.argv[1]), title=f"Tile overflow {sys.argv[2]} {i}", symptom="s", cause="c",
            fix="f", snippet="x = 1\\n" * 2000)
"""


def test_a_killed_proposer_leaves_only_drafts_that_lint(tmp_path):
    drafts = tmp_path / "skills" / "_drafts"
    for run, delay in enumerate((0.0, 0.3, 0.6, 0.9)):
        before = len(list(drafts.iterdir())) if drafts.is_dir() else 0
        proc = subprocess.Popen([sys.executable, "-c", PROPOSER, str(tmp_path), f"run{run}"])
        deadline = time.monotonic() + 30
        while not (drafts.is_dir() and len(list(drafts.iterdir())) > before):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.001)
        time.sleep(delay)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    files = find_draft_files(tmp_path)
    assert files and lint_paths(files, tmp_path) == []
    # every visible draft folder has its SKILL.md: nothing half-made is listed
    visible = [p for p in drafts.iterdir() if not p.name.startswith(".")]
    assert sorted(p / "SKILL.md" for p in visible) == files
    # what the killed ones left staged is removed by a later proposal once it is old
    stale = [p for p in drafts.iterdir() if p.name.startswith(".")]
    for p in stale:
        os.utime(p, (time.time() - 3600, time.time() - 3600))
    propose(tmp_path, title="After the kills", symptom="s", cause="c", fix="f")
    assert not [p for p in drafts.iterdir() if p.name.startswith(".")]
