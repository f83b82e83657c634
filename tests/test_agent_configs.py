"""The agent-runtime configurations in the repo work as written.

- `.claude-plugin/` passes `claude plugin validate --strict` (Claude Code from npm; skipped
  where it is not installed), and its router skill is what `kbase export --portable` writes;
- the plugin's MCP entry and the Codex config, run as written (with ${CLAUDE_PLUGIN_ROOT}
  substituted the way Claude Code does), serve a real MCP client from a folder outside the
  knowledge base (plugin) or inside it (Codex project config).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import tomllib
from pathlib import Path

import anyio
import pytest
from serve_fixtures import REPO

from kbase import KnowledgeBase
from kbase.serve.export import ROUTER

pytest.importorskip("mcp")


def test_claude_plugin_validates_strictly():
    claude = shutil.which("claude")
    if claude is None:
        pytest.skip("Claude Code is not installed (npm install -g @anthropic-ai/claude-code)")
    for target in (REPO, REPO / ".claude-plugin" / "plugin.json"):
        r = subprocess.run(
            [claude, "plugin", "validate", "--strict", str(target)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 0, r.stdout + r.stderr
        assert "Validation passed" in r.stdout


def test_plugin_names_only_the_router_and_it_is_current(tmp_path):
    plugin = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())
    market = json.loads((REPO / ".claude-plugin" / "marketplace.json").read_text())
    # Declaring skills in a "./" marketplace entry keeps Claude Code from loading skills/ (the
    # knowledge itself) as 40+ agent skills: only the router goes into the catalog.
    [entry] = market["plugins"]
    assert entry["source"] == "./" and entry["skills"] == plugin["skills"]
    [skill_dir] = plugin["skills"]
    shipped = (REPO / skill_dir / "SKILL.md").read_text()
    KnowledgeBase(root=REPO).export(tmp_path, portable=True)
    assert (tmp_path / ROUTER / "SKILL.md").read_text() == shipped, (
        "plugin/skills is out of date: run `kbase export plugin/skills --portable`"
    )
    assert "pip install kbase`" not in shipped.replace("never `pip install kbase`", "")


async def _search_once(command: str, args: list[str], env: dict, cwd: Path, query: str) -> dict:
    from mcp import Client, StdioServerParameters

    params = StdioServerParameters(command=command, args=args, env=env, cwd=str(cwd))
    async with Client(params, read_timeout_seconds=120) as c:
        res = await c.call_tool("search", {"query": query, "k": 3})
        assert not res.is_error, res.content
        return json.loads(res.content[0].text)


def _server_env(indexed_root, tmp_path) -> dict:  # noqa: F811
    home = tmp_path / "home"
    shutil.copytree(indexed_root.home, home)
    env = dict(indexed_root.env(), KBASE_HOME=str(home))
    env.pop("KBASE_ROOT")
    return env


def _command(cmd: str, args: list[str]) -> tuple[str, list[str]]:
    exe = shutil.which(cmd)
    if exe is None:
        pytest.skip(f"`{cmd}` is not on PATH")
    return exe, args


def test_repo_as_a_plugin_folder_has_one_server_and_the_router_only():
    """What Claude Code loads from this repository as a plugin folder (plugins reference,
    https://code.claude.com/docs/en/plugins-reference): the manifest's `mcpServers` and a
    .mcp.json at the plugin root; the manifest's `skills` in place of the default skills/ folder.
    Inside the repository a root .mcp.json is also Claude Code's project-scope config, a second
    server beside the plugin's (they do not merge: anthropics/claude-code#56355), which issue #27
    found. So there is none: in this repository, load it as a plugin folder."""
    plugin = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())
    assert not (REPO / ".mcp.json").exists() and list(plugin["mcpServers"]) == ["kbase"]
    assert plugin["skills"] == ["./plugin/skills/kbase-gpu-kernel-knowledge"]
    assert [p.name for p in (REPO / "plugin" / "skills").iterdir()] == [ROUTER]


def test_plugin_mcp_entry_as_written(indexed_root, tmp_path):  # noqa: F811
    server = json.loads((REPO / ".claude-plugin" / "plugin.json").read_text())["mcpServers"]
    cmd, args = _command(server["kbase"]["command"], server["kbase"]["args"])
    args = [a.replace("${CLAUDE_PLUGIN_ROOT}", str(indexed_root.root)) for a in args]
    elsewhere = tmp_path / "my-project"
    elsewhere.mkdir()
    name = indexed_root.names[0]
    out = anyio.run(
        _search_once,
        cmd,
        args,
        _server_env(indexed_root, tmp_path),
        elsewhere,
        name.replace("-", " "),
    )
    assert name in [h["id"] for h in out["hits"]]


def test_codex_project_config_as_written(indexed_root, tmp_path):  # noqa: F811
    conf = tomllib.loads((REPO / ".codex" / "config.toml").read_text())["mcp_servers"]["kbase"]
    cmd, args = _command(conf["command"], conf["args"])
    name = indexed_root.names[1]
    inside = indexed_root.root / "skills" / name  # Codex runs somewhere inside the project
    out = anyio.run(
        _search_once, cmd, args, _server_env(indexed_root, tmp_path), inside, name.replace("-", " ")
    )
    assert name in [h["id"] for h in out["hits"]]
