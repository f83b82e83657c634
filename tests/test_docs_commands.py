"""Every `kbase ...` command line the docs show names a command and options that exist."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import typer

from kbase.cli import app

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
SPAN = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"(?:^|[\s;&|($])kbase((?:\s+[^\s;&|#`)]+)+)")
FENCE = re.compile(r"^\s*```(\S*)")
SHELLS = {"", "bash", "sh", "shell", "console", "text", "yaml", "toml", "json"}


def _calls(path: Path) -> list[tuple[int, list[str]]]:
    """(line, tokens after `kbase`) for every command line in code spans and shell blocks."""
    out: list[tuple[int, list[str]]] = []
    lang = None  # None outside a fenced block
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        fence = FENCE.match(line)
        if fence:
            lang = None if lang is not None else fence.group(1).lower()
            continue
        if lang is not None:
            texts = [line.split(" #", 1)[0]] if lang in SHELLS else []
        else:
            texts = SPAN.findall(line)
        for text in texts:
            for m in CALL.finditer(text):
                toks = m.group(1).split()
                if "kbase" in toks:  # `claude mcp add kbase -- kbase mcp ...`: the inner call
                    toks = toks[len(toks) - toks[::-1].index("kbase") :]
                elif toks[0] == "--":
                    continue
                out.append((i, toks))
    return out


def _all_calls() -> list[tuple[str, list[str]]]:
    return [(f"{p.relative_to(REPO)}:{line}", toks) for p in DOCS for line, toks in _calls(p)]


def _options(cmd: Any) -> set[str]:
    opts = {"--help", "-h"}
    for p in cmd.params:
        opts.update(p.opts)
        opts.update(getattr(p, "secondary_opts", []))
    return opts


def test_the_docs_show_commands_at_all():
    calls = _all_calls()
    assert len(calls) > 40
    shown = {toks[0] for _, toks in calls if not toks[0].startswith("-")}
    assert {"search", "index", "lint", "verify", "audit", "mcp", "serve", "mine"} <= shown


@pytest.mark.parametrize("where, tokens", _all_calls(), ids=lambda v: str(v)[:60])
def test_each_documented_command_line_exists(where, tokens):
    group = typer.main.get_command(app)
    assert hasattr(group, "commands")
    words = list(tokens)
    while words and words[0].startswith("-"):  # options of `kbase` itself (--version, --root...)
        opt = words.pop(0).split("=", 1)[0]
        assert opt in _options(group), f"{where}: `kbase {opt}` is not an option of kbase"
    if not words:
        return
    name = words.pop(0)
    if not re.fullmatch(r"[a-z][a-z-]*", name):
        return  # a placeholder such as `kbase <command>`
    assert name in group.commands, f"{where}: `kbase {name}` is not a command ({tokens})"
    cmd = group.commands[name]
    if hasattr(cmd, "commands") and words and words[0] in cmd.commands:
        cmd = cmd.commands[words.pop(0)]
    known = _options(cmd)
    for w in words:
        if re.fullmatch(r"--?[A-Za-z][\w-]*(=.*)?", w):
            opt = w.split("=", 1)[0]
            assert opt in known, f"{where}: `kbase {name} {opt}`: no such option ({sorted(known)})"


# kbase sets these in a snippet's environment, read there (the runner, a scaffolded snippet)
SNIPPET_SIDE = {
    "KBASE_WAIT_TURN",
    "KBASE_PRELOAD",
    "KBASE_TIER",
    "KBASE_RECORD_FD",
    "KBASE_NONCE_FD",
}
READ = re.compile(r"""(?:environ(?:\.get|\.pop)?\(\s*|environ\[|envvar=)['"](KBASE_\w+)['"]""")


def test_every_setting_the_code_reads_is_in_the_readme_table():
    read = {
        m
        for folder in ("kbase", "ingest", "retrieval", "validators")
        for p in (REPO / folder).rglob("*.py")
        for m in READ.findall(p.read_text(encoding="utf-8"))
    }
    assert {"KBASE_ROOT", "KBASE_SANDBOX", "KBASE_MINE_CACHE"} <= read  # the scan works
    text = (REPO / "README.md").read_text(encoding="utf-8")
    table = text[text.index("## Configuration") :].split("\n\n", 2)[2].split("\n\n", 1)[0]
    listed = set(re.findall(r"^\| `(KBASE_\w+)`", table, re.M))
    assert read - SNIPPET_SIDE == listed, (read - SNIPPET_SIDE) ^ listed
    sandbox = next(row for row in table.splitlines() if row.startswith("| `KBASE_SANDBOX`"))
    assert "NEVER" in sandbox and "isolated: false" in sandbox
