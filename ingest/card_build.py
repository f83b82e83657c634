"""Build a card (schema.PRCard) from one commit's facts, or from two commits of the same PR. A
card depends on the commit's facts, the recipe and the code that builds and validates cards; the
cache key digests the first two (`card_key`), the cache's version the third (mine_cache). The
commit body is read here too (`read_body`, docs/pr-archive.md "The commit body")."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field

from kbase.ingest import classify
from kbase.ingest.change_symbols import rank_key
from kbase.ingest.gitlog import CommitFacts, FileFacts

from kbase.schema import FileChange, PRCard, Recipe

KEY_DIFF_LINES = 20
SHORT_SHA = 12


def shown_path(p: str) -> str:
    """A path as a card shows it. git paths are any bytes; the miner keeps them as str with
    surrogate escapes (they round-trip to git), which UTF-8 cannot write: a byte that is not
    UTF-8 is shown as `\\xff`, so one such path no longer stops a repository's mine."""
    if p.isascii() or not any("\udc80" <= ch <= "\udcff" for ch in p):
        return p
    return p.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def to_change(f: FileFacts) -> FileChange:
    # symbols, named_by, kinds and weights are parallel (change_symbols.Named)
    order = sorted(
        range(len(f.symbols)),
        key=lambda i: rank_key(f.symbols[i], f.kinds[i], f.path, f.weights[i]),
    )
    return FileChange(
        # a diff git could not produce (ingest/logrun.py's salvage) has no counts and a problem
        unreadable=f.added is None and f.problem is not None,
        path=shown_path(f.path),
        old_path=shown_path(f.old_path) if f.old_path else f.old_path,
        added=f.added,
        deleted=f.deleted,
        symbols=[f.symbols[i] for i in order],
        named_by=[f.named_by[i] for i in order],
        kernels=[f.symbols[i] for i in order if f.kinds[i] == "kernel"],
    )


def merge_files(into: list[FileChange], extra: list[FileChange]) -> list[FileChange]:
    """Two commits of one PR: counts add up, symbols and kernels are united."""
    by_path = {f.path: f for f in into}
    for f in extra:
        have = by_path.get(f.path)
        if have is None:
            by_path[f.path] = f
            continue
        added = None if have.added is None or f.added is None else have.added + f.added
        deleted = None if have.deleted is None or f.deleted is None else have.deleted + f.deleted
        syms = list(have.symbols)
        # cards from before symbols were parsed have no named_by: hunk headers named them
        named = list(have.named_by) + ["hunk-header"] * (len(syms) - len(have.named_by))
        for i, s in enumerate(f.symbols):
            if s not in syms:
                syms.append(s)
                named.append(f.named_by[i] if i < len(f.named_by) else "hunk-header")
        by_path[f.path] = have.model_copy(
            update={
                "added": added,
                "deleted": deleted,
                "symbols": syms,
                "named_by": named,
                "kernels": list(dict.fromkeys(have.kernels + f.kernels)),
                "old_path": have.old_path or f.old_path,
                "unreadable": have.unreadable or f.unreadable,
            }
        )
    return sorted(by_path.values(), key=lambda x: x.path)


def ranked_symbols(files: list[FileChange]) -> list[str]:
    best: dict[str, tuple[int, int, str]] = {}
    for f in files:
        kernels = set(f.kernels)
        for pos, s in enumerate(f.symbols):
            kind = "kernel" if s in kernels else "function"
            key = rank_key(s, kind, f.path, 0)
            # within a group, a symbol listed earlier in a bigger file ranks higher
            key = (key[0], pos - ((f.added or 0) + (f.deleted or 0)), s)
            if s not in best or key < best[s]:
                best[s] = key
    return sorted(best, key=lambda s: best[s])


def key_diff(facts: list[FileFacts], files: list[FileChange]) -> str | None:
    """At most KEY_DIFF_LINES lines: hunks of the files whose symbols rank highest, no tests."""
    by_path = {f.path: f for f in facts}

    def file_rank(fc: FileChange) -> tuple:
        kind = dict.fromkeys(fc.kernels, "kernel")
        ranks = (rank_key(s, kind.get(s, "function"), fc.path, 0)[0] for s in fc.symbols)
        return (min(ranks, default=6), -((fc.added or 0) + (fc.deleted or 0)), fc.path)

    out: list[str] = []
    for fc in sorted(files, key=file_rank):
        ff = by_path.get(fc.path)
        # a file whose change names no function (a constant, a launch config, top-level code)
        # still shows, after those that do; tests never
        if ff is None or not ff.excerpts or file_rank(fc)[0] == 5:
            continue
        if rank_key("", "", fc.path, 0)[0] == 5:  # a test file
            continue
        if len(out) + 2 > KEY_DIFF_LINES:
            break
        head = len(out)
        out.append(f"--- {fc.path}")
        for _, new_start, lines in ff.excerpts:
            if len(out) + 2 > KEY_DIFF_LINES:
                break
            if all(_is_comment(ln[1:]) for ln in lines):
                continue  # a copyright year, a reworded comment: not what the change is
            out.append(f"@@ +{new_start}")
            room = KEY_DIFF_LINES - len(out)
            out.extend(lines[:room])
        if len(out) == head + 1:
            out.pop()  # every hunk was comments: no header without a line under it
        if len(out) >= KEY_DIFF_LINES:
            break
    return "\n".join(out[:KEY_DIFF_LINES]) if out else None


_DIRECTIVE = ("#define", "#undef", "#if", "#el", "#endif", "#include", "#pragma")


def _is_comment(line: str) -> bool:
    t = line.strip()
    if t.startswith(_DIRECTIVE):  # C preprocessor: code, not a comment
        return False
    return not t or t.startswith(("//", "/*", "*", "#", '"""'))


DESCRIPTION_LIMIT = 1500  # characters kept on the card

_TRAILER = re.compile(
    r"^(co-authored-by|signed-off-by|reviewed-by|approved-by|acked-by|tested-by|reported-by|"
    r"suggested-by|helped-by|cc|ghstack-source-id|pull request resolved|differential revision)"
    r"\s*:\s*(.*)$",
    re.I,
)
_CHECKBOX = re.compile(r"^\s*[-*+]\s*\[[ xX]\]\s*")
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_HEADING = re.compile(r"^\s*#{1,6}\s*(.*?)\s*#*\s*$")
_RULE = re.compile(r"^\s*(?:-{3,}|\*{3,}|_{3,}|={3,})\s*$")
# headings of template sections whose content is a checklist or instructions, not the change
_TEMPLATE_SECTIONS = re.compile(
    r"^(?:\W+\s*)?(checklist|pull request checklist|pre-?commit checks?|reviewer notes?|"
    r"before submitting|pr checklist|"
    r"related issues? \(optional\)|tests?|motivation and context \(optional\)|"
    r"use cases? \(optional\)|bc-breaking \(optional\))$",
    re.I,
)
_BOILERPLATE = re.compile(
    r"^(thank you for|thanks for (your|contributing)|please (describe|make sure|read|fill|"
    r"provide|link|check)|i have (read|run|added|updated)|my code follows|"
    r"(make sure|ensure) (you|that)|if this pr|this pr (is|was) (created|generated) by|"
    r"\(optional\)|n/?a\.?$|none\.?$|-\s*$)",
    re.I,
)
# an issue: `#12`, `owner/repo#12` or its URL; a link is a word like "fixes" and one or more
_ISSUE = r"(?:(?:[\w.-]+/[\w.-]+)?#\d+|https://github\.com/[\w.-]+/[\w.-]+/issues/\d+)"
_ISSUE_LINK = re.compile(
    r"\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?|addresses|related to|refs?|see)\s*:?\s+"
    rf"({_ISSUE}(?:\s*(?:,|and)\s*{_ISSUE})*)",
    re.I,
)
_ISSUE_NUM = re.compile(r"(?:(?<![\w/])#(\d+)|/issues/(\d+))")
_REVERTS_COMMIT = re.compile(r"\bThis reverts commit ([0-9a-f]{7,40})\b", re.I)
_REVERTS_PR = re.compile(
    r"\b(?:reverts?|revert of|reverting)\s+(?:PR\s*)?(?:[\w.-]+/[\w.-]+)?#(\d+)"
    r"|\breverts?\s+https://github\.com/[\w.-]+/[\w.-]+/pull/(\d+)",
    re.I,
)
_UNIT = (
    r"(?:x|×|%|GB/s|TB/s|GiB/s|TFLOPS|TFLOP/s|GFLOPS|PFLOPS|ms|us|µs|ns|s|tokens?/s|tok/s|"
    r"it/s|GB|GiB|MB|MiB|KB|TB|W)"
)
_NUMBER = re.compile(
    rf"(?<![\w.])(\d+(?:[.,]\d+)?\s?{_UNIT})(?![\w/])"
    rf"|(?<![\w.])((?:speed-?up|faster|improvement)\s+of\s+\d+(?:\.\d+)?\s?{_UNIT}?)",
    re.I,
)
_DIGIT = re.compile(r"\d")  # every _NUMBER match holds one
_LINK_HINT = re.compile(r"#\d|/issues/\d")  # every _ISSUE_LINK match holds one


@dataclass
class BodyFacts:
    description: str = ""
    co_authors: list[str] = field(default_factory=list)
    issues: list[int] = field(default_factory=list)
    reverts_pr: int | None = None
    reverts_commit: str | None = None
    numbers: list[str] = field(default_factory=list)


def read_body(body: str, own_pr: int | None = None) -> BodyFacts:
    out = BodyFacts()
    # the case-insensitive patterns below scan the whole body; most bodies lack the words
    # they need, which a substring test tells sooner (in ASCII text only: outside it, case
    # folding can match other letters, e.g. U+017F to "s")
    low = body.lower() if body.isascii() else None
    if low is None or "revert" in low:
        if m := _REVERTS_COMMIT.search(body):
            out.reverts_commit = m.group(1).lower()
        if m := _REVERTS_PR.search(body):
            out.reverts_pr = int(m.group(1) or m.group(2))
    kept: list[str] = []
    skip_section = False
    for raw in _COMMENT.sub("", body).splitlines() if "<!--" in body else body.splitlines():
        line = raw.rstrip()
        if not line:  # no pattern below matches an empty line: the common case, decided early
            if not skip_section:
                kept.append(line)
            continue
        if ":" in line and (t := _TRAILER.match(line.strip())):
            if t.group(1).lower() == "co-authored-by":
                name = re.sub(r"\s*<[^>]*>\s*$", "", t.group(2)).strip()
                if name and name not in out.co_authors:
                    out.co_authors.append(name)
            continue
        if "#" in line and (h := _HEADING.match(line)):
            title = h.group(1).strip().rstrip(":")
            skip_section = bool(_TEMPLATE_SECTIONS.match(title))
            if not skip_section and title:
                kept.append(f"\x00{title}:")
            continue
        if skip_section or _CHECKBOX.match(line) or _RULE.match(line):
            continue
        if _BOILERPLATE.match(line.strip()):
            continue
        if "evert" in line.lower() and _REVERTS_COMMIT.search(line):
            continue
        kept.append(line)
    # a heading left with nothing under it goes too
    lines: list[str] = []
    for i, line in enumerate(kept):
        if line.startswith("\x00"):
            nxt = next((x for x in kept[i + 1 :] if x.strip()), "\x00")
            if nxt.startswith("\x00"):
                continue
            line = line[1:]
        lines.append(line)
    # every kept line is right-stripped: only runs of blank lines are left to squeeze
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
    if len(text) > DESCRIPTION_LIMIT:
        cut = text.rfind("\n", 0, DESCRIPTION_LIMIT)
        text = text[: cut if cut > DESCRIPTION_LIMIT // 2 else DESCRIPTION_LIMIT].rstrip() + " …"
    out.description = text
    links = _ISSUE_LINK.finditer(body) if low is None or _LINK_HINT.search(low) else ()
    for lm in links:
        for num in _ISSUE_NUM.finditer(lm.group(1)):
            n = int(num.group(1) or num.group(2))
            if n != own_pr and n not in out.issues and n != out.reverts_pr:
                out.issues.append(n)
    for nm in _NUMBER.finditer(text) if _DIGIT.search(text) else ():
        v = " ".join((nm.group(1) or nm.group(2)).split())
        if v not in out.numbers and not re.fullmatch(r"[01]\s?s", v):
            out.numbers.append(v)
    out.numbers = out.numbers[:12]
    return out


def body_facts(c: CommitFacts, pr: int | None, style: str | None) -> BodyFacts:
    body = c.body
    if style == "merge":  # the first body line of a merge commit is the PR title
        lines = body.splitlines()
        first = next((i for i, ln in enumerate(lines) if ln.strip()), None)
        body = "\n".join(lines[first + 1 :]) if first is not None else ""
    return read_body(body, pr)


def build_card(
    recipe: Recipe,
    matcher,
    *,
    pr: int | None,
    title: str,
    sha: str,
    date: str,
    files: list[FileChange],
    body: BodyFacts,
    key: str | None = None,
    also: list[str] | None = None,
) -> PRCard:
    fams: set[str] = set()
    for f in files:
        fams.update(matcher.families_of(f.path))
        if f.old_path:
            fams.update(matcher.families_of(f.old_path))
    paths = [f.path for f in files]
    cats = classify.categories(title, paths)
    totals = {
        "files": len(files),
        "added": sum(f.added or 0 for f in files),
        "deleted": sum(f.deleted or 0 for f in files),
    }
    binary = sum(1 for f in files if f.added is None and not f.unreadable)
    unreadable = sum(1 for f in files if f.unreadable)
    totals.update((k, n) for k, n in (("binary", binary), ("unreadable", unreadable)) if n)
    reverts = None
    if "revert" in cats:
        reverts = classify.reverted_pr(title)
        reverts = body.reverts_pr if reverts is None else reverts
    if reverts == pr:  # a PR that names itself
        reverts = None
    commit_url = f"{recipe.upstream}/commit/{sha}" if recipe.upstream else None
    return PRCard(
        repo=recipe.name,
        pr=pr,
        kind="pr" if pr is not None else "commit",
        url=recipe.pr_url(pr) if pr is not None else commit_url,
        sha=sha,
        date=date,
        title=title,
        families=sorted(fams),
        files=files,
        totals=totals,
        categories=cats,
        reverts=reverts,
        tags=classify.tags(title, paths),
        reverts_commit=body.reverts_commit[:SHORT_SHA] if body.reverts_commit else None,
        description=body.description or None,
        co_authors=list(body.co_authors),
        issues=list(body.issues),
        numbers=list(body.numbers),
        touched=ranked_symbols(files),
        key_diff=key,
        also=list(also or []),
    )


def title_of(c: CommitFacts, style: str | None) -> str:
    """The PR title: a merge keeps it in the body; a squash subject's ' (#N)' is dropped."""
    if style == "merge":
        return next((ln.strip() for ln in c.body.splitlines() if ln.strip()), c.subject)
    if style is None:
        return c.subject
    return classify.PR_SUFFIX.sub("", c.subject).strip() or c.subject


def recipe_key(recipe: Recipe) -> str:
    return hashlib.sha256(recipe.model_dump_json().encode()).hexdigest()[:16]


def card_key(packed_commit: tuple, recipe: str) -> str:
    """`packed_commit`: logrun.pack_commit of the facts; `recipe`: `recipe_key`. The facts are
    digested through repr, which (unlike marshal) writes equal values as equal bytes."""
    text = repr(packed_commit).encode("utf-8", "backslashreplace")
    digest = hashlib.blake2b(text, digest_size=16).hexdigest()
    return f"{packed_commit[0]}:{recipe}:{digest}"
