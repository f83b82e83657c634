"""Draft skills proposed from experience: `skills/_drafts/<name>/SKILL.md`, lint-clean and
`draft` whatever the ledger says until a person moves it to skills/ (docs/agents.md)."""

from __future__ import annotations

import re
import shutil
import tempfile
import time
import unicodedata
from dataclasses import dataclass
from datetime import date
from pathlib import Path

import yaml

from kbase.closed_sets import DRAFT_STATUS
from kbase.errors import InvalidArgument

DRAFTS = Path("skills") / "_drafts"
LIMITS = {"title": 120, "symptom": 2000, "cause": 2000, "fix": 2000, "snippet": 20_000}
MAX_TAGS = 8
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# Numbers in prose must be backed by a claim (kbase lint); a proposer's numbers are quoted as code
# instead, which is what they are until a reviewer turns them into claims.
_NUMBERY = re.compile(r"(?<![`\w])([\w.:/=<>+*-]*\d[\w.:/=<>+*-]*)(?![`\w])")

SKIP_SNIPPET = (
    "# No check was proposed with this draft: a reviewer writes one before it can be verified.\n"
    'print("draft: no verification snippet yet")\n'
    "raise SystemExit(77)  # skip: never a pass\n"
)


class DraftError(InvalidArgument):
    """A proposal that cannot be written; the message names the field."""


@dataclass
class Draft:
    name: str
    path: str  # relative to the root

    def as_dict(self) -> dict:
        return {"name": self.name, "path": self.path, "status": DRAFT_STATUS}


def find_draft_files(root: Path) -> list[Path]:
    base = Path(root) / DRAFTS
    if not base.is_dir():
        return []
    return sorted(p / "SKILL.md" for p in base.iterdir() if (p / "SKILL.md").is_file())


def _text(field: str, v: object, required: bool = True) -> str:
    if v is None or (isinstance(v, str) and not v.strip()):
        if required:
            raise DraftError(f"{field} is required")
        return ""
    if not isinstance(v, str):
        raise DraftError(f"{field} must be a string, got {type(v).__name__}")
    v = unicodedata.normalize("NFC", v.replace("\r\n", "\n")).strip()
    if len(v) > LIMITS[field]:
        raise DraftError(f"{field} is {len(v)} characters long; the limit is {LIMITS[field]}")
    if _CONTROL.search(v):
        raise DraftError(f"{field} contains control characters")
    if field != "snippet" and "```" in v:
        raise DraftError(f"{field} may not contain a code fence (```); pass code as the snippet")
    if field == "title" and "\n" in v:
        raise DraftError("title must be one line")
    return v


def slug(title: str) -> str:
    ascii_ = unicodedata.normalize("NFKD", title).encode("ascii", "ignore").decode()
    words = re.findall(r"[a-z0-9]+", ascii_.lower())
    out: list[str] = []
    for w in words:  # whole words only, at most 48 characters
        if len("-".join([*out, w])) > 48:
            break
        out.append(w)
    return "-".join(out) or "proposal"


def _quote_numbers(s: str) -> str:
    """One line of prose with every number-bearing token set as code (see _NUMBERY)."""
    s = re.sub(r"\s+", " ", s).strip()
    parts = re.split(r"(`[^`]*`)", s)  # leave existing code spans alone
    return "".join(p if p.startswith("`") else _NUMBERY.sub(r"`\1`", p) for p in parts)


def _block_safe(line: str) -> str:
    """One line of prose that cannot start a Markdown block of its own (a heading such as
    `## Verification`, a quote, a list, a rule, a setext underline, HTML, a table)."""
    return "\\" + line if re.match(r"^(?:[#>+*=|<~-]|\d+[.)])", line) else line


def _render(
    name: str, title: str, symptom: str, cause: str, fix: str, snippet: str, tags: dict, today: date
) -> str:
    lines = [ln for ln in symptom.splitlines() if ln.strip()]
    code = (snippet or SKIP_SNIPPET).rstrip("\n")
    # a fence longer than any backtick run in the code: a snippet holding ``` cannot close its
    # own block and add sections after it
    fence = "`" * max(3, 1 + max((len(m) for m in re.findall(r"`+", code)), default=0))
    fm = {
        "name": name,
        "description": _quote_numbers(f"Draft from experience: {title}. Fix: {fix}")[:1000],
        "trigger": [_quote_numbers(ln)[:300] for ln in lines[:5]] or [_quote_numbers(title)],
        "steps": [_quote_numbers(fix)],
        "failure_modes": [
            {
                "symptom": _quote_numbers(lines[0] if lines else title),
                "cause": _quote_numbers(cause),
                "fix": _quote_numbers(fix),
            }
        ],
        "verification": {
            "tiers": ["cpu-interpret"],
            "timeout_s": 120,
            "asserts": "unreviewed: what the proposer's snippet checks, if it has one",
        },
        "audit": {"date": today.isoformat(), "by": "kbase propose (unreviewed draft)"},
        "tags": tags,
    }
    head = yaml.safe_dump(fm, sort_keys=False, allow_unicode=True, width=100)
    body = [
        f"# {title}",
        "Proposed from an agent's or engineer's experience; not reviewed, not verified.",
        "## Symptom",
        f"```text\n{symptom}\n```",
        "## Cause",
        _block_safe(_quote_numbers(cause)),
        "## Fix",
        _block_safe(_quote_numbers(fix)),
        "## Verification",
        f"{fence}python verify\n{code}\n{fence}",
    ]
    return "---\n" + head + "---\n" + "\n\n".join(body) + "\n"


STAGING_MAX_AGE_S = 600  # a proposal is staged for milliseconds; older ones lost their writer


def _sweep_staging(drafts: Path) -> None:
    """Remove the hidden staging folders of proposers that were killed mid-write."""
    cutoff = time.time() - STAGING_MAX_AGE_S
    for p in drafts.glob(".*"):
        try:
            if p.is_dir() and p.stat().st_mtime < cutoff:
                shutil.rmtree(p, ignore_errors=True)
        except OSError:
            continue


def propose(
    root: Path,
    title: str,
    symptom: str,
    cause: str,
    fix: str,
    snippet: str | None = None,
    tags: dict[str, list[str]] | None = None,
    name: str | None = None,
    known_ids: set[str] | None = None,
    today: date | None = None,
) -> Draft:
    """Write a new draft; refuses a name already used by a skill or a draft."""
    from kbase.ingest.skills import lint_paths
    from kbase.schema import NAME_RE, Tags

    title, symptom, cause, fix = map(_text, LIMITS, (title, symptom, cause, fix))
    code = _text("snippet", snippet, required=False)
    name = slug(title) if name is None else name
    if not isinstance(name, str) or not NAME_RE.match(name) or len(name) > 64:
        raise DraftError(f"name {str(name)[:80]!r} must be kebab-case, at most 64 characters")
    try:
        tag_values = {k: v for k, v in Tags(**(tags or {})).model_dump().items() if v}
    except Exception as exc:  # pydantic names the key and the value
        raise DraftError(f"tags: {exc}") from None
    if sum(len(v) for v in tag_values.values()) > MAX_TAGS:
        raise DraftError(f"at most {MAX_TAGS} tag values")
    root = Path(root)
    if (root / "skills" / name).exists() or (known_ids is not None and name in known_ids):
        raise DraftError(f"a skill named {name!r} exists already; pass another name")
    folder = root / DRAFTS / name
    if folder.exists():
        raise DraftError(f"a draft named {name!r} exists already ({folder.relative_to(root)})")
    text = _render(name, title, symptom, cause, fix, code, tag_values, today or date.today())
    # Written and linted in a hidden folder, then renamed into place: a draft either lints or
    # does not exist, even when the writer is killed half-way (nothing lists the hidden folder).
    folder.parent.mkdir(parents=True, exist_ok=True)
    _sweep_staging(folder.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}.", dir=folder.parent))
    try:
        staged = tmp / name / "SKILL.md"
        staged.parent.mkdir()
        staged.write_text(text, encoding="utf-8")
        problems = [str(p) for p in lint_paths([staged], root)]
        if problems:  # never leave a draft that does not lint: the proposer gets the problems
            raise DraftError("the draft does not pass lint: " + "; ".join(problems[:5]))
        try:
            staged.parent.rename(folder)
        except OSError:  # another proposal took the name meanwhile
            raise DraftError(f"a draft named {name!r} exists already") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return Draft(name=name, path=(folder / "SKILL.md").relative_to(root).as_posix())
