"""`kbase export DEST --format agent-skills`: a router skill, and with `--all` every skill, as
Agent-Skills folders (docs/agents.md: why only the router by default). Only the Agent Skills
front-matter keys are written; kbase's own keys go into the body, its status into metadata."""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from kbase.closed_sets import TIER_SPECS
from kbase.errors import KbaseError

TARGETS = ("claude", "codex")
MARKER = ".kbase-export"  # marks folders we wrote, so a re-export may replace them and nothing else
ROUTER = "kbase-gpu-kernel-knowledge"
ROUTER_DESCRIPTION = (
    "Look up verified GPU-kernel engineering know-how (CUDA, Triton, CUTLASS, PyTorch custom ops) "
    "and mined pull requests of kernel repos before writing, debugging, tuning or reviewing a GPU "
    "kernel. Use when a kernel gives wrong results, crashes (illegal memory access, invalid "
    "configuration), recompiles, is slow, or when choosing tiling, precision, launch or timing "
    "methodology. Not for general Python or C++ questions."
)
INSTALL_HINT = (
    "Needs the `kbase` command, installed from the kbase git repository or a clone of it "
    "(distribution gpu-kbase, e.g. `uv tool install 'gpu-kbase[index] @ git+<kbase repo URL>'`; "
    "never `pip install kbase`, an unrelated PyPI project), or a kbase MCP server."
)

# The router's text as it reads; {r} is the `--root` argument of its commands (or nothing).
HOW_TO_ASK = """\
# Ask kbase about GPU kernels

kbase is a searchable knowledge base of GPU-kernel experience. Every skill in it carries a runnable
check of its claim and a status from the last run of that check. Ask it *before* guessing.

## How to ask

If an MCP server named `kbase` is configured, use its tools: `search` (query, k, kind, repo, tags,
status, env), `get` (id, section), `history` (repo, family, since, until, limit), `list`, `stale`;
`feedback` and `propose` when the server allows writes. Otherwise use the command line:

1. Search with the literal error line plus your root-cause guess, not only the API name:
   `kbase search "illegal memory access only for huge batches; int32 offset?" --json{r}`
   The answer is `{"query", "no_good_match", "hits": [{id, title, status, section,
   snippet, path, line, confidence, ...}],
   "candidates": [{id, kind, status, use_when, trigger, confidence}]}`;
   pick from `candidates` by reading them; `no_good_match: true` means nothing fits.
2. Read the best hit, or only the section the hit names:
   `kbase get <id> --json{r}` or `kbase get <id> --section steps --json{r}`
3. Filters: `--kind skill|pr`, `--repo NAME` (PR cards of one repo), `--tag archs=sm90`,
   `--status verified`.

Which knowledge base answers: `--root PATH`, else `$KBASE_ROOT`, else the nearest folder at or
above the current one holding `skills/` or `pr_archive/`; with none of these kbase exits 2 and
says so (it never answers from an empty folder)."""

HOW_TO_WEIGH = """\
## How to weigh an answer

- `verified`: the skill's check passed recently in a matching environment. Follow it.
- `stale-age`, `stale-env`, `stale-source`: probably right but not re-checked for this setup; \
confirm
  with the skill's verification script before relying on a number.
- `failing`: the check fails now. Treat the skill as a lead, not a fact.
- `unverified`, `self-reported`: never checked by a runner we trust; read it as advice.
- `draft`: proposed from experience, not reviewed or verified yet.
- `mined`: a pull request card, a fact about what changed upstream and why.

A test failing in front of you beats any entry. Cite the entry id when you act on it."""


def router_body(
    skills: list[tuple[str, str, str]] | None,
    mcp_url: str | None,
    root: str | None,
    exported_at: str,
    linked: frozenset[str] = frozenset(),
) -> str:
    """`linked`: the skills of the catalog exported beside the router: it links their SKILL.md."""
    blocks = [HOW_TO_ASK.replace("{r}", f" --root {shlex.quote(root)}" if root else "")]
    if root:
        blocks.append(f"This export names the knowledge base at `{root}`.")
    if mcp_url:
        blocks.append(f"This team runs it over streamable HTTP at `{mcp_url}`.")
    blocks.append(HOW_TO_WEIGH)
    if skills:
        blocks += [
            "## What is in it",
            f"Statuses as of the export ({exported_at}); kbase itself answers with current ones.",
        ]
        if linked:
            blocks.append("Each entry links its exported SKILL.md; read it when the entry fits.")
        rows = []
        for name, title, status in skills:
            ref = f"[`{name}`](../{name}/SKILL.md)" if name in linked else f"`{name}`"
            rows.append(f"- {ref} ({status}): {title}")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) + "\n"


def front_matter(meta: dict) -> str:
    return "---\n" + yaml.safe_dump(meta, sort_keys=False, allow_unicode=True, width=100) + "---\n"


def oneline(s: str) -> str:
    return re.sub(r"\s+", " ", s).strip()


def _md_text(s: str) -> str:
    """Front-matter prose as Markdown: one line, and `kernel[grid](...)` must not become a link."""
    return re.sub(r"\[([^\]]*)\]\(", r"\\[\1\\](", oneline(s))


def clip(s: str, n: int) -> str:
    s = oneline(s)
    return s if len(s) <= n else s[: n - 1].rstrip() + "…"


def _strip_snippets(skill) -> str:
    """The body with each verification block replaced by a pointer to the exported script."""
    from markdown_it import MarkdownIt

    marks = set(skill.meta.verification.blocks)
    body_lines = skill.doc.body.split("\n")
    cut = [
        tok.map
        for tok in MarkdownIt("commonmark").parse(skill.doc.body)
        if tok.type == "fence" and tok.map and marks & set(tok.info.split()[1:])
    ]
    pointer = '*(The verification code is in `scripts/`; see "Verify it" above.)*'
    for start, end in reversed(cut):
        body_lines[start:end] = [pointer]
    text = "\n".join(body_lines).strip() + "\n"
    # Adjacent blocks (a .cu file and the Python driver) would leave the pointer twice in a row.
    dup = re.escape(pointer)
    return re.sub(rf"({dup})(\s*\n\s*{dup})+", r"\1", text)


def skill_scripts(files: dict[str, str]) -> dict[str, str]:
    """scripts/<file> -> text, from the snippet's files as the sandbox lays them out
    (`KnowledgeBase.snippet_files`, the runtime contract of docs/skill-format.md)."""
    out = {("verify.py" if name == "snippet.py" else name): text for name, text in files.items()}
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
            "pass, 77 = skipped)."
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


# Codex refuses a skill whose front-matter description holds "<" or ">" (issue #27: 13 of the
# --all export did): the same meaning without them.
_ANGLES = (("<=", "≤"), (">=", "≥"), ("->", "→"), ("<", "‹"), (">", "›"))


def skill_markdown(
    skill, status: str, audit, scripts: dict[str, str], exported_at: str = "", target: str = ""
) -> str:
    """`target` "codex": Codex's rules for the front-matter (no `compatibility` key, no angle
    brackets in the description)."""
    m = skill.meta
    metadata = {
        "kbase-id": m.name,
        "kbase-status": status,
        "kbase-audit-date": m.audit.date.isoformat(),
        "kbase-tiers": " ".join(m.verification.tiers),
        "kbase-source": skill.path,
        "kbase-exported-at": exported_at,
    }
    optional = {
        "kbase-verified-on": audit and audit.verified_on,
        "kbase-last-pass": audit and audit.last_pass,
        "kbase-tags": " ".join(m.tags.flat()),
    }
    metadata.update((k, v) for k, v in optional.items() if v)
    fm: dict = {"name": m.name, "description": clip(m.description, 1024)}
    if m.license:
        fm["license"] = m.license
    langs = ", ".join(m.tags.languages) or "GPU toolchain"
    compat = f"Written for {langs}; verification runs on: {', '.join(m.verification.tiers)}"
    if m.verification.min_compute_capability:
        compat += f" (GPU tier needs compute capability >= {m.verification.min_compute_capability})"
    if target == "codex":
        for a, b in _ANGLES:
            fm["description"] = fm["description"].replace(a, b)
    else:
        fm["compatibility"] = clip(compat, 500)
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
    return front_matter(fm) + "\n" + "\n".join(body)


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
        return asdict(self)


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
        n = str(len(skills))
        router_fm["metadata"].update({"kbase-skills": n, "kbase-exported-at": exported_at})
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
