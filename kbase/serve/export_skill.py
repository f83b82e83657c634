"""One kbase skill as an Agent-Skills folder's text (SKILL.md and scripts/) for
kbase/serve/export.py, and the front-matter and one-line text helpers it also uses."""

from __future__ import annotations

import re

import yaml

from kbase.closed_sets import TIER_SPECS


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
    return re.sub(
        r"(" + re.escape(pointer) + r")(\s*\n\s*" + re.escape(pointer) + r")+", r"\1", text
    )


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
