"""The router skill's text: the one skill `kbase export` always writes (kbase/serve/export.py)."""

from __future__ import annotations

import shlex

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
