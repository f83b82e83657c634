"""`kbase export DEST --format agent-skills`: skills as Agent-Skills folders for agent runtimes.

An agent runtime puts every installed skill's name and description into its prompt, and that
catalog has a small budget. So by default only one router skill is exported: it teaches the
agent to ask kbase (`kbase search --json` or the MCP server) mid-task. `--all` also exports
each skill as its own folder, with the verification snippet under scripts/.

Only the front-matter keys of the Agent Skills format are written (name, description, license,
compatibility, metadata with string values, allowed-tools); kbase's own keys (trigger, steps,
failure modes) are rendered into the body and its audit status goes into metadata.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import yaml

from kbase.closed_sets import TIER_SPECS
from kbase.errors import KbaseError

ROUTER = "kbase-gpu-kernel-knowledge"
TARGETS = ("claude", "codex")
ALLOWED_KEYS = ("name", "description", "license", "compatibility", "metadata", "allowed-tools")
NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MARKER = ".kbase-export"  # marks folders we wrote, so a re-export may replace them and nothing else


class ExportError(KbaseError, ValueError):
    pass


@dataclass
class ExportReport:
    dest: str
    target: str
    skills: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    exported_at: str = ""

    def as_dict(self) -> dict:
        return {
            "dest": self.dest,
            "target": self.target,
            "exported_at": self.exported_at,
            "skills": self.skills,
            "files": self.files,
            "skipped": self.skipped,
        }


def _front_matter(meta: dict) -> str:
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100) + "---\n"


def _oneline(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _md_text(s: str) -> str:
    """Front-matter prose as Markdown: one line, and `kernel[grid](...)` must not become a link."""
    return re.sub(r"\[([^\]]*)\]\(", r"\\[\1\\](", _oneline(s))


def _clip(s: str, n: int) -> str:
    s = _oneline(s)
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


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


def _openai_yaml(
    display: str, short: str, prompt: str, mcp: bool, mcp_url: str | None, root: str | None
) -> str:
    doc: dict = {
        "interface": {
            "display_name": display,
            "short_description": short,
            "default_prompt": prompt,
        },
        "policy": {"allow_implicit_invocation": True},
    }
    if mcp:
        tool = {
            "type": "mcp",
            "value": "kbase",
            "description": "kbase knowledge-base MCP server (read-only)",
        }
        if mcp_url:
            tool.update(transport="streamable_http", url=mcp_url)
        else:
            # Codex starts the server in the agent's own project: name the root, or it finds none.
            cmd = f"kbase mcp --root {shlex.quote(root)}" if root else "kbase mcp"
            tool.update(transport="stdio", command=cmd)
        doc["dependencies"] = {"tools": [tool]}
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=100)


# --------------------------------------------------------------------------- the router


ROUTER_DESCRIPTION = (
    "Look up verified GPU-kernel engineering know-how (CUDA, Triton, CUTLASS, PyTorch custom ops) "
    "and "
    "mined pull requests of kernel repos before writing, debugging, tuning or reviewing a GPU "
    "kernel. "
    "Use when a kernel gives wrong results, crashes (illegal memory access, invalid "
    "configuration), "
    "recompiles, is slow, or when choosing tiling, precision, launch or timing methodology. Not "
    "for "
    "general Python or C++ questions."
)


INSTALL_HINT = (
    "Needs the `kbase` command, installed from the kbase git repository or a clone of it "
    "(distribution gpu-kbase, e.g. `uv tool install 'gpu-kbase[index] @ git+<kbase repo URL>'`; "
    "never `pip install kbase`, an unrelated PyPI project), or a kbase MCP server."
)


def _router_body(
    skills: list[tuple[str, str, str]] | None,
    mcp_url: str | None,
    root: str | None,
    exported_at: str,
) -> str:
    r = f" --root {shlex.quote(root)}" if root else ""
    lines = [
        "# Ask kbase about GPU kernels",
        "",
        "kbase is a searchable knowledge base of GPU-kernel experience. Every skill in it carries "
        "a runnable",
        "check of its claim and a status from the last run of that check. Ask it *before* "
        "guessing.",
        "",
        "## How to ask",
        "",
        "If an MCP server named `kbase` is configured, use its tools: `search` (query, k, kind, "
        "repo, tags,",
        "status, env), `get` (id, section), `history` (repo, family, since, until, limit), "
        "`list`, `stale`;",
        "`feedback` and `propose` when the server allows writes. Otherwise use the command line:",
        "",
        "1. Search with the symptom, the literal error message or the topic:",
        f'   `kbase search "illegal memory access after kernel launch" --json -k 5{r}`',
        "   The answer is "
        '`{"query", "hits": [{id, title, status, section, snippet, path, line, ...}]}`.',
        "2. Read the best hit, or only the section the hit names:",
        f"   `kbase get <id> --json{r}` or `kbase get <id> --section steps --json{r}`",
        "3. Filters: `--kind skill|pr`, `--repo NAME` (PR cards of one repo), `--tag archs=sm90`,",
        "   `--status verified`.",
        "",
        "Which knowledge base answers: `--root PATH`, else `$KBASE_ROOT`, else the nearest folder "
        "at or",
        "above the current one holding `skills/` or `pr_archive/`; with none of these kbase exits "
        "2 and",
        "says so (it never answers from an empty folder).",
    ]
    if root:
        lines += ["", f"This export names the knowledge base at `{root}`."]
    if mcp_url:
        lines += ["", f"This team runs it over streamable HTTP at `{mcp_url}`."]
    lines += [
        "",
        "## How to weigh an answer",
        "",
        "- `verified`: the skill's check passed recently in a matching environment. Follow it.",
        "- `stale-age`, `stale-env`, `stale-source`: probably right but not re-checked for this "
        "setup; confirm",
        "  with the skill's verification script before relying on a number.",
        "- `failing`: the check fails now. Treat the skill as a lead, not a fact.",
        "- `unverified`, `self-reported`: never checked by a runner we trust; read it as advice.",
        "- `draft`: proposed from experience, not reviewed or verified yet.",
        "- `mined`: a pull request card, a fact about what changed upstream and why.",
        "",
        "A test failing in front of you beats any entry. Cite the entry id when you act on it.",
    ]
    if skills:
        lines += [
            "",
            "## What is in it",
            "",
            f"Statuses as of the export ({exported_at}); kbase itself answers with current ones.",
            "",
        ]
        lines += [f"- `{name}` ({status}): {title}" for name, title, status in skills]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- one skill


def _strip_snippets(skill) -> str:
    """The body with each verification block replaced by a pointer to the exported script."""
    from markdown_it import MarkdownIt

    marks = set(skill.meta.verification.blocks)
    body_lines = skill.doc.body.split("\n")
    cut: list[tuple[int, int]] = []
    for tok in MarkdownIt("commonmark").parse(skill.doc.body):
        if tok.type == "fence" and tok.map and marks & set(tok.info.split()[1:]):
            cut.append((tok.map[0], tok.map[1]))
    pointer = '*(The verification code is in `scripts/`; see "Verify it" above.)*'
    for start, end in reversed(cut):
        body_lines[start:end] = [pointer]
    text = "\n".join(body_lines).strip() + "\n"
    # Adjacent blocks (a .cu file and the Python driver) would leave the pointer twice in a row.
    return re.sub(
        r"(" + re.escape(pointer) + r")(\s*\n\s*" + re.escape(pointer) + r")+", r"\1", text
    )


def _scripts(skill) -> dict[str, str]:
    """scripts/<file> -> text, following the snippet runtime contract (docs/skill-format.md)."""
    from kbase.validators.snippets import layout_blocks

    files = layout_blocks(skill.snippet_blocks()).files
    out: dict[str, str] = {}
    for f in files:
        name = "verify.py" if f.name == "snippet.py" else f.name
        out[name] = f.text
    if "verify.py" not in out and list(out) == ["snippet_0.cu"]:
        out = {"verify.cu": out["snippet_0.cu"]}
    return out


def _verify_section(skill, scripts: dict[str, str]) -> list[str]:
    v = skill.meta.verification
    lines = ["## Verify it", "", f"The check asserts: {v.asserts}", ""]
    tiers = ", ".join(v.tiers)
    if "verify.py" in scripts:
        lines.append(
            f"Run `cd scripts && KBASE_TIER=<tier> python verify.py` (tiers: {tiers}; exit 0 = "
            "pass, "
            "77 = skipped)."
        )
        cpu = [t for t in v.tiers if TIER_SPECS[t].python_only and not TIER_SPECS[t].sees_gpu]
        if cpu:
            env = "".join(f" {k}={val}" for k, val in TIER_SPECS[cpu[0]].env.items())
            lines.append(
                f"On a machine without a GPU: `KBASE_TIER={cpu[0]}{env} python verify.py`."
            )
    else:
        cu = next(iter(scripts))
        lines.append(
            f"Build and run: `cd scripts && nvcc -arch=native {cu} -o verify && ./verify` (tiers: "
            f"{tiers})."
        )
    if v.min_compute_capability:
        lines.append(f"The GPU check needs compute capability {v.min_compute_capability} or newer.")
    lines += ["", "Files: " + ", ".join(f"[scripts/{n}](scripts/{n})" for n in scripts)]
    return lines


def _skill_markdown(
    skill, status: str, audit, scripts: dict[str, str], exported_at: str = ""
) -> str:
    m = skill.meta
    metadata = {
        "kbase-id": m.name,
        "kbase-status": status,
        "kbase-audit-date": m.audit.date.isoformat(),
        "kbase-tiers": " ".join(m.verification.tiers),
        "kbase-source": skill.path,
        "kbase-exported-at": exported_at,
    }
    if audit is not None and audit.verified_on:
        metadata["kbase-verified-on"] = str(audit.verified_on)
    if audit is not None and audit.last_pass:
        metadata["kbase-last-pass"] = str(audit.last_pass)
    tags = " ".join(m.tags.flat())
    if tags:
        metadata["kbase-tags"] = tags
    fm: dict = {"name": m.name, "description": _clip(m.description, 1024)}
    if m.license:
        fm["license"] = m.license
    langs = ", ".join(m.tags.languages) or "GPU toolchain"
    compat = f"Written for {langs}; verification runs on: {', '.join(m.verification.tiers)}"
    if m.verification.min_compute_capability:
        compat += f" (GPU tier needs compute capability >= {m.verification.min_compute_capability})"
    fm["compatibility"] = _clip(compat, 500)
    fm["metadata"] = {k: str(v) for k, v in metadata.items()}
    body = [
        skill.doc.title and f"# {skill.doc.title}" or f"# {m.name}",
        "",
        f"Status in kbase: **{status}**"
        + (f" (last pass {audit.last_pass})" if audit and audit.last_pass else "")
        + f", as of the export at {exported_at}; `kbase get {m.name}` gives the current one.",
        "",
        "## When to use",
        "",
    ]
    body += [f"- {_md_text(t)}" for t in m.trigger]
    body += ["", "## Steps", ""] + [f"{i}. {_md_text(s)}" for i, s in enumerate(m.steps, 1)]
    body += ["", "## Failure modes", ""]
    for f in m.failure_modes:
        body += [
            f"- **Symptom:** {_md_text(f.symptom)}",
            f"  **Cause:** {_md_text(f.cause)}",
            f"  **Fix:** {_md_text(f.fix)}",
        ]
    body += [""] + _verify_section(skill, scripts) + [""]
    rest = _strip_snippets(skill)
    # The body's own H1 repeats the title; drop it and demote nothing else.
    rest = re.sub(r"\A#\s[^\n]*\n+", "", rest)
    body += ["## Details", "", rest]
    if m.sources:
        body += ["## Sources", ""] + [f"- {u}" for u in m.sources] + [""]
    return _front_matter(fm) + "\n" + "\n".join(body)


# --------------------------------------------------------------------------- entry point


def export_agent_skills(
    root: Path,
    dest: Path,
    target: str = "claude",
    include_all: bool = False,
    mcp_url: str | None = None,
    portable: bool = False,
) -> ExportReport:
    """`portable`: the router names no root and lists no skills (the copy shipped in the plugin)."""
    from kbase.ingest.markdown import DocumentError
    from kbase.ingest.skills import find_skill_files, load_skill

    if target not in TARGETS:
        raise ExportError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
    dest = Path(dest).resolve()
    dest.mkdir(parents=True, exist_ok=True)
    exported_at = datetime.now(UTC).replace(microsecond=0).isoformat()
    rep = ExportReport(dest=str(dest), target=target, exported_at=exported_at)
    statuses = _statuses(root)
    root_s = None if portable else str(Path(root).resolve())
    skills = []
    for f in find_skill_files(root):
        try:
            skills.append(load_skill(f, root))
        except DocumentError as de:
            rep.skipped.append(
                f"{f.parent.name}: {de.problems[0] if de.problems else 'does not load'}"
            )
    catalog = [
        (
            s.name,
            _oneline(s.doc.title or s.name),
            statuses[s.name].status if s.name in statuses else "unverified",
        )
        for s in skills
    ]

    rdir = dest / ROUTER
    _prepare_dir(rdir)
    router_fm = {
        "name": ROUTER,
        "description": ROUTER_DESCRIPTION,
        "compatibility": INSTALL_HINT,
        "metadata": {"kbase-role": "router"},
        "allowed-tools": "Bash(kbase:*)" if target == "claude" else "Bash",
    }
    if not portable:
        router_fm["metadata"].update(  # type: ignore[attr-defined]
            {"kbase-skills": str(len(skills)), "kbase-exported-at": exported_at}
        )
    body = _router_body(None if portable else catalog, mcp_url, root_s, exported_at)
    _write(rep, rdir, "SKILL.md", _front_matter(router_fm) + "\n" + body)
    if target == "codex":
        _write(
            rep,
            rdir,
            "agents/openai.yaml",
            _openai_yaml(
                "kbase GPU kernel knowledge",
                "Ask kbase before writing or debugging GPU kernels",
                f"Use ${ROUTER} to look up what kbase knows about this kernel problem.",
                True,
                mcp_url,
                root_s,
            ),
        )
    rep.skills.append(ROUTER)

    if include_all:
        for s in skills:
            if s.name == ROUTER:
                continue
            audit = statuses.get(s.name)
            status = audit.status if audit is not None else "unverified"
            try:
                scripts = _scripts(s)
            except ValueError as exc:  # a snippet the runtime contract cannot lay out
                rep.skipped.append(f"{s.name}: {exc}")
                continue
            d = dest / s.name
            _prepare_dir(d)
            _write(rep, d, "SKILL.md", _skill_markdown(s, status, audit, scripts, exported_at))
            for name, text in scripts.items():
                _write(rep, d, f"scripts/{name}", text)
            if target == "codex":
                title = _oneline(s.doc.title or s.name)
                short = (
                    _clip(title, 64) if len(title) >= 25 else _clip(f"{title} (kbase skill)", 64)
                )
                _write(
                    rep,
                    d,
                    "agents/openai.yaml",
                    _openai_yaml(
                        _clip(title, 64),
                        short,
                        f"Use ${s.name} for this kernel problem.",
                        False,
                        None,
                        None,
                    ),
                )
            rep.skills.append(s.name)
    return rep


def _statuses(root: Path) -> dict:
    from kbase.validators.status import skill_statuses

    try:
        return skill_statuses(root)
    except FileNotFoundError:
        return {}
