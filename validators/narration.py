"""The `[ledger-narration]` lint: prose states what holds, the ledger says what a run measured.

A sentence such as "2.1x in the H200 run" or "no GPU value yet" narrates the ledger's state at
the time it was written; it goes stale with the next audit while `kbase get` renders every
measured value per environment from the ledger itself. Scanned: the description, the triggers,
the steps, the failure modes, the claims' text and the body prose (outside fenced code).

The patterns are tight on purpose (every one of them names a run, a row or the ledger's
progress): "the GPU runs the work later" or "only a GPU run can show it" are statements about
GPUs, not about recorded runs, and pass.
"""

from __future__ import annotations

import re

_GPU = r"(?:H100|H200|H20|A100|A10G|L4|L40S?|B200|GB200|RTX\s?\d{4})"
_COUNT = r"(?:one|two|three|four|several|both|all|some|earlier|later|other|these)"
NARRATION = [
    # "in the H200 run", "one H100 run", "across H200 runs", "the H200 run's Triton"
    re.compile(rf"\b{_GPU}\s+runs?\b"),
    # "signed run(s)", "the two signed H200 runs", "signed rows"
    re.compile(r"\bsigned\s+(?:\w+\s+)?(?:runs?|rows?)\b", re.I),
    # "no GPU value yet", "no GPU row", "no passing run in the ledger"
    re.compile(r"\bno\s+(?:GPU|passing|signed)\s+(?:values?|rows?|runs?)\b", re.I),
    re.compile(r"\b(?:awaits?|waiting for)\s+(?:its|a|the)\s+(?:GPU\s+)?(?:rows?|runs?)\b", re.I),
    re.compile(r"\bledger\b[^.;]*\b(?:yet|so far)\b", re.I),
    re.compile(r"\b(?:runs?|rows?)\s+(?:is|are)\s+not\s+in\s+the\s+ledger\b", re.I),
    re.compile(r"\b(?:recorded|measured|runs?)\s+so\s+far\b", re.I),
    # "(0.87 in one run)", "in two of three runs"
    re.compile(
        r"\bin\s+(?:one|two|three|both|several)\s+(?:of\s+(?:the\s+)?\w+\s+)?(?:runs?|audits?)\b",
        re.I,
    ),
    re.compile(
        r"\b(?:an?\s+)?(?:earlier|older|previous|first)\s+versions?\s+of\s+(?:this|the)\s+snippet\b",
        re.I,
    ),
    # "measured on the H200: 2.1x", "2.1x on the H200", "(16 in one H200 run)"
    re.compile(rf"\b(?:measured|seen|observed)\s+(?:on|in)\s+(?:the|an?)\s+{_GPU}\b", re.I),
    re.compile(rf"(?<![\w.])\d+(?:\.\d+)?\s*(?:x|×|%|µs|us|ms|ulps?)\s+(?:on|in)\s+the\s+{_GPU}\b"),
    re.compile(rf"\b(?:in|from)\s+{_COUNT}\s+(?:of\s+the\s+)?(?:GPU|CPU|audit)\s+runs\b", re.I),
]


def narration_in(text: str) -> list[str]:
    """The phrases of a piece of prose that narrate runs or ledger state."""
    return [m.group(0) for rx in NARRATION for m in rx.finditer(text)]


def _places(skill) -> list[tuple[int, str, str]]:
    from kbase.validators.numbers import body_lines, prose_places

    d = skill.doc
    out = prose_places(skill, triggers=True)
    for i, c in enumerate(skill.meta.claims):
        out.append((d.line_of(("claims", i, "text")), f"claims.{c.id}.text", c.text))
    return out + _paragraphs(body_lines(skill.text))


def _paragraphs(lines: list[tuple[int, str]]) -> list[tuple[int, str, str]]:
    """Body lines joined into paragraphs, so a phrase that wraps is still found; a blank line, a
    list item, a heading or a table row starts a new one, which is reported at its first line."""
    out: list[tuple[int, str, str]] = []
    start = 0
    buf: list[str] = []
    for n, text in lines:
        opens = text.lstrip().startswith(("- ", "* ", "#", "|"))
        if buf and (not text.strip() or opens):
            out.append((start, "body", " ".join(buf)))
            buf = []
        if text.strip():
            start = n if not buf else start
            buf.append(text.strip())
    if buf:
        out.append((start, "body", " ".join(buf)))
    return out


def ledger_narration(skill) -> list:
    """kbase.schema.Problem per place whose prose narrates runs or ledger state."""
    from kbase.schema import Problem

    problems = []
    for line, where, text in _places(skill):
        found = narration_in(text)
        if found:
            problems.append(
                Problem(
                    path=skill.path,
                    line=line,
                    field=where,
                    code="ledger-narration",
                    message=f"{where} narrates runs ({'; '.join(repr(f) for f in found)}): state "
                    "what holds and declare where (when: gpu/arch/triton); `kbase get` renders "
                    "the measured values from the ledger",
                )
            )
    return problems
