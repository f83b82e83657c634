"""The commit body of a PR, read: the description cleaned of template boilerplate, co-authors,
linked issues, what a revert undoes, numbers with units (docs/pr-archive.md "The commit body")."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

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
