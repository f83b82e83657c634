"""End to end with clients nobody here wrote the server for.

1. The MCP SDK's own client drives `kbase mcp --allow-write` over stdio through the whole loop:
   search -> get -> history -> feedback -> propose, then finds the draft it proposed.
2. The MCP Inspector CLI (`--strict`, npm @modelcontextprotocol/inspector 2.x, Node >= 22) lists
   the tools over stdio and over streamable HTTP and reports 0 schema problems. It is found
   through $MCP_INSPECTOR (a command prefix, as .ci/run sets it) or npx; the test skips without.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import anyio
import pytest
from serve_fixtures import free_port, indexed_root, wait_http  # noqa: F401  (pytest fixture)

pytest.importorskip("mcp")


def _kbase() -> list[str]:
    exe = shutil.which("kbase")
    return [exe] if exe else [sys.executable, "-m", "kbase.cli"]


@pytest.fixture(scope="module")
def loop_root(indexed_root, tmp_path_factory):  # noqa: F811
    """A copy of the indexed root plus a one-family PR archive, so history has something."""
    from kbase.ingest import card_format

    from kbase.schema import FileChange, PRCard

    base = tmp_path_factory.mktemp("e2e")
    root = base / "kb"
    shutil.copytree(indexed_root.root, root, ignore=shutil.ignore_patterns(".kbase"))
    shutil.copytree(indexed_root.home, base / "home")
    folder = root / "pr_archive" / "kern"
    folder.mkdir(parents=True)
    for pr, day, title in (
        (21, "2025-01-05", "Add fused attention"),
        (22, "2025-06-01", "Fix mask"),
    ):
        card = PRCard(
            repo="kern",
            pr=pr,
            sha=f"{pr:040x}",
            date=f"{day}T12:00:00+00:00",
            title=title,
            families=["attention"],
            files=[FileChange(path="csrc/attention/fused.cu", added=3, deleted=1)],
        )
        (folder / f"{pr}.md").write_text(card_format.render_card(card), encoding="utf-8")
    (folder / ".state.json").write_text(
        json.dumps({"last_sha": "0" * 40, "families": {"attention": ["csrc/attention/**"]}})
    )
    env = dict(indexed_root.env(), KBASE_HOME=str(base / "home"), KBASE_ROOT=str(root))
    return root, env


def test_search_get_history_feedback_propose_over_stdio(loop_root):
    from mcp import Client, StdioServerParameters

    root, env = loop_root
    cmd = _kbase()
    params = StdioServerParameters(
        command=cmd[0], args=[*cmd[1:], "mcp", "--allow-write", "--root", str(root)], env=env
    )
    skill = sorted(p.name for p in (root / "skills").iterdir() if p.is_dir())[0]

    async def main():
        async with Client(params, read_timeout_seconds=300) as c:
            found = await c.call_tool("search", {"query": skill.replace("-", " "), "k": 3})
            top = found.structured_content["hits"][0]
            doc = await c.call_tool("get", {"id": top["id"], "max_chars": 400})
            hist = await c.call_tool("history", {"repo": "kern", "family": "attention", "limit": 1})
            fb = await c.call_tool(
                "feedback", {"id": top["id"], "verdict": "helpful", "note": "it was the mask"}
            )
            prop = await c.call_tool(
                "propose",
                {
                    "title": "Zorblax kernel hangs when the grid is empty",
                    "symptom": "zorblax launch never returns with grid=(0,)",
                    "cause": "the launcher waits on a stream no block ever signals",
                    "fix": "return early when the grid is empty",
                },
            )
            again = await c.call_tool(
                "search", {"query": "zorblax kernel hangs empty grid", "k": 3}
            )
            after = await c.call_tool("get", {"id": top["id"]})
            return found, doc, hist, fb, prop, again, after

    found, doc, hist, fb, prop, again, after = anyio.run(main)
    for r in (found, doc, hist, fb, prop, again, after):
        assert not r.is_error, r.content[0].text
    assert doc.structured_content["text"] and len(doc.content[0].text) <= 400
    assert [p["pr"] for p in hist.structured_content["prs"]] == [22]  # newest first
    assert hist.structured_content["next_cursor"]
    assert fb.structured_content["feedback"]["counts"]["helpful"] == 1
    assert prop.structured_content["status"] == "draft" and prop.structured_content["indexed"]
    draft = prop.structured_content["name"]
    assert (root / "skills" / "_drafts" / draft / "SKILL.md").is_file()
    hits = {h["id"]: h["status"] for h in again.structured_content["hits"]}
    assert hits.get(draft) == "draft"
    assert after.structured_content["feedback"]["recent"][0]["note"] == "it was the mask"


def _inspector() -> list[str] | None:
    explicit = os.environ.get("MCP_INSPECTOR")
    candidates = [shlex.split(explicit)] if explicit else []
    if shutil.which("npx"):
        candidates.append(["npx", "--no-install", "@modelcontextprotocol/inspector"])
    for cmd in candidates:
        try:
            help_ = subprocess.run(
                [*cmd, "--cli", "--help"], capture_output=True, text=True, timeout=120
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if "--strict" in help_.stdout:
            return cmd
    return None


def _strict_tools_list(
    inspector: list[str], target: list[str], env: dict
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*inspector, "--cli", "--strict", "--method", "tools/list", *target],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_inspector_strict_over_stdio_and_http(loop_root, tmp_path):
    inspector = _inspector()
    if inspector is None:
        pytest.skip("MCP Inspector 2.x with --strict not found (set MCP_INSPECTOR; see .ci/run)")
    root, env = loop_root
    cmd = _kbase()
    stdio = _strict_tools_list(
        inspector, ["-e", f"KBASE_HOME={env['KBASE_HOME']}", *cmd, "mcp", "--root", str(root)], env
    )
    assert stdio.returncode == 0, stdio.stderr[-3000:]
    tools = {t["name"] for t in json.loads(stdio.stdout)["tools"]}
    assert {"search", "get", "history", "list", "stale"} <= tools

    port = free_port()
    log = open(tmp_path / "mcp-http.log", "wb")
    proc = subprocess.Popen(
        [*cmd, "mcp", "--allow-write", "--root", str(root), "--http", f"127.0.0.1:{port}"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/mcp", timeout=180, proc=proc)
        time.sleep(0.5)
        http = _strict_tools_list(inspector, [f"http://127.0.0.1:{port}/mcp"], env)
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
    assert http.returncode == 0, http.stderr[-3000:]
    tools = {t["name"] for t in json.loads(http.stdout)["tools"]}
    assert {"feedback", "propose"} <= tools
    for run in (stdio, http):
        assert "error" not in run.stderr.lower() or "0 error" in run.stderr.lower(), run.stderr[
            -2000:
        ]
