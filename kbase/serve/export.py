"""`kbase export DEST --format agent-skills`: a router skill, and with `--all` every skill, as
Agent-Skills folders (docs/agents.md: why only the router by default). Only the Agent Skills
front-matter keys are written; kbase's own keys go into the body, its status into metadata."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kbase.errors import KbaseError
from kbase.serve.export_router import INSTALL_HINT, ROUTER, ROUTER_DESCRIPTION, router_body
from kbase.serve.export_skill import clip, front_matter, oneline, skill_markdown, skill_scripts

TARGETS = ("claude", "codex")
MARKER = ".kbase-export"  # marks folders we wrote, so a re-export may replace them and nothing else


class ExportError(KbaseError, ValueError):
    pass


@dataclass
class ExportReport:
    dest: str
    target: str
    exported_at: str = ""
    skills: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _write(report: ExportReport, base: Path, rel: str, text: str) -> None:
    p = base / rel
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text, encoding="utf-8")
    report.files.append(str(p.relative_to(Path(report.dest))))


def _prepare_dir(d: Path) -> None:
    if d.exists():
        if not (d / MARKER).exists():
            raise ExportError(
                f"{d} exists and was not written by kbase export; remove it or pick another DEST"
            )
        shutil.rmtree(d)
    d.mkdir(parents=True)
    (d / MARKER).write_text("written by `kbase export`; safe to delete\n")


# Codex's list of the skills it may pick by itself, when the context window is unknown; the names
# and paths of ~200 skills alone are ~3x that, so only the router is in it (docs/agents.md).
CODEX_LIST_BUDGET = 8000


def _openai_yaml(display: str, short: str, prompt: str, tool: dict | None = None) -> str:
    """agents/openai.yaml. With `tool` (the router's MCP server) Codex may pick the skill by
    itself; every other skill is listed for `$name` mentions only (see CODEX_LIST_BUDGET)."""
    ui = {"display_name": display, "short_description": short, "default_prompt": prompt}
    doc: dict = {"interface": ui, "policy": {"allow_implicit_invocation": tool is not None}}
    if tool is not None:
        doc["dependencies"] = {"tools": [tool]}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


def _mcp_tool(mcp_url: str | None, root: str | None) -> dict:
    tool = dict(
        type="mcp", value="kbase", description="kbase knowledge-base MCP server (read-only)"
    )
    if mcp_url:
        tool.update(transport="streamable_http", url=mcp_url)
    else:
        # Codex starts the server in the agent's own project: name the root, or it finds none.
        cmd = f"kbase mcp --root {shlex.quote(root)}" if root else "kbase mcp"
        tool.update(transport="stdio", command=cmd)
    return tool


def export_agent_skills(
    kb: Any,
    dest: Path,
    target: str = "claude",
    include_all: bool = False,
    mcp_url: str | None = None,
    portable: bool = False,
) -> ExportReport:
    """`kb`: the KnowledgeBase whose skills are exported. `portable`: the router names no root
    and lists no skills (the copy shipped in the plugin)."""
    if target not in TARGETS:
        raise ExportError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    exported_at = datetime.now(UTC).replace(microsecond=0).isoformat()
    statuses = kb.statuses()
    root_s = None if portable else str(Path(kb.root).resolve())
    skills, skipped = kb.skills()
    rep = ExportReport(dest=str(dest), target=target, exported_at=exported_at, skipped=skipped)
    status = {s.name: getattr(statuses.get(s.name), "status", "unverified") for s in skills}
    catalog = [(s.name, oneline(s.doc.title or s.name), status[s.name]) for s in skills]
    if include_all:  # first: the router's catalog links the skills that were exported
        for s in skills:
            if s.name != ROUTER:
                _export_skill(kb, rep, dest, s, statuses.get(s.name), target, exported_at)
    rdir = dest / ROUTER
    _prepare_dir(rdir)
    router_fm: dict[str, Any] = {
        "name": ROUTER,
        "description": ROUTER_DESCRIPTION,
        # Codex refuses the key (issue #27)
        **({} if target == "codex" else {"compatibility": INSTALL_HINT}),
        "metadata": {"kbase-role": "router"},
        "allowed-tools": "Bash(kbase:*)" if target == "claude" else "Bash",
    }
    if not portable:
        router_fm["metadata"].update(
            {"kbase-skills": str(len(skills)), "kbase-exported-at": exported_at}
        )
    body = router_body(
        None if portable else catalog, mcp_url, root_s, exported_at, frozenset(rep.skills)
    )
    _write(rep, rdir, "SKILL.md", front_matter(router_fm) + "\n" + body)
    if target == "codex":
        ask = "Ask kbase before writing or debugging GPU kernels"
        prompt = f"Use ${ROUTER} to look up what kbase knows about this kernel problem."
        text = _openai_yaml("kbase GPU kernel knowledge", ask, prompt, _mcp_tool(mcp_url, root_s))
        _write(rep, rdir, "agents/openai.yaml", text)
    rep.skills.insert(0, ROUTER)
    return rep


def _export_skill(
    kb: Any, rep: ExportReport, dest: Path, s: Any, audit: Any, target: str, exported_at: str
) -> None:
    """One skill's folder: SKILL.md, its snippet under scripts/, agents/openai.yaml for codex."""
    status = getattr(audit, "status", "unverified")
    try:
        scripts = skill_scripts(kb.snippet_files(s))
    except ValueError as exc:  # a snippet the runtime contract cannot lay out
        rep.skipped.append(f"{s.name}: {exc}")
        return
    d = dest / s.name
    _prepare_dir(d)
    markdown = skill_markdown(s, status, audit, scripts, exported_at, target)
    _write(rep, d, "SKILL.md", markdown)
    for name, text in scripts.items():
        _write(rep, d, f"scripts/{name}", text)
    if target == "codex":
        title = oneline(s.doc.title or s.name)
        short = clip(title, 64) if len(title) >= 25 else clip(f"{title} (kbase skill)", 64)
        yaml_text = _openai_yaml(clip(title, 64), short, f"Use ${s.name} for this kernel problem.")
        _write(rep, d, "agents/openai.yaml", yaml_text)
    rep.skills.append(s.name)
