"""Issue #28: what a snippet prints (ESC sequences, CR, bidi overrides, rich markup, HTML and
Markdown) reaches the terminal and the audit's Markdown job summary inert."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import snippet_skill


def test_a_snippets_output_reaches_terminal_and_markdown_inert(tmp_path):
    root = tmp_path / "kb"
    code = (
        'import sys\nprint("progress\\rOVERWRITTEN")\n'
        'sys.exit("[bold red]ALL PASSED[/] \\x1b]0;pwned\\x07\\x1b[2J <img src=x onerror=y> '
        '\\u202e")'
    )
    snippet_skill(root, "loud-skill", code)
    env = {**os.environ, "COLUMNS": "300"}

    def kbase(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "kbase.cli", *args, "--root", str(root)],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        )

    ran = kbase("verify", "loud-skill", "--no-record")
    assert ran.returncode == 1, ran.stdout + ran.stderr
    out = ran.stdout + ran.stderr
    for raw in ("\x1b]0;", "\x1b[2J", "\x07", "\r", "\u202e"):
        assert raw not in out, (raw, out)
    assert "[bold red]ALL PASSED[/]" in out  # shown as written, not as markup
    assert "\\x1b]0;pwned" in out

    md = tmp_path / "audit.md"
    kbase("audit", "--markdown", str(md), "--fail-on", "never")
    text = md.read_text()
    assert "loud-skill" in text
    assert "\x1b" not in text and "<img" not in text and "\u202e" not in text
    assert "&lt;img" in text
