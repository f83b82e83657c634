"""The prose lints of a skill, `unbacked-number` and `ledger-narration` (CONTRIBUTING.md, "Claims").
Digits inside identifiers (fp16, sm_90, H100), list numbering and versions are no quantities: a
version names an environment. Narration goes stale with the next audit; its patterns are tight on
purpose (each names a run, a row or the ledger's progress): "only a GPU run can show it" passes."""

from __future__ import annotations

import functools
import math
import re
from importlib import resources

_POW = r"(?P<base>\d+)\s*(?:\^|\*\*)\s*(?P<exp>[-+−]?\d+)"
_DEC = r"(?P<num>\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?)"
# not glued to a word character or a dot on the left (fp16, sm_90, .5 of 0.5 handled by _DEC)
NUMBER_RE = re.compile(rf"(?<![\w./^*])-?(?:{_POW}|{_DEC})(?![\w.]*\d)(?![A-Za-wyzA-Z_])")
_CODE_SPAN = re.compile(r"`+[^`]*`+")
_URL = re.compile(r"https?://\S+|\]\([^)]*\)|<[^>]+>")
_LIST_NUM = re.compile(r"^\s*\d+[.)]\s")
_VERSION = re.compile(r"\b\d+\.\d+\.\d+\b")
# a version names an environment, it is not a quantity: "Triton 3.6", "CUDA 12.8", "torch 2.11"
_TOOL_VERSION = re.compile(
    r"(?i)\b(triton|torch|pytorch|cuda|nvcc|python|cutlass|cudnn|cublas|driver|ptx isa|jax)"
    r"\s+v?\d+(?:\.\d+)+"
)


def _value(m: re.Match) -> float | None:
    try:
        if m.group("base") is not None:
            exp = m.group("exp").replace("−", "-")
            return float(int(m.group("base")) ** int(exp))
        v = float(m.group("num").replace(",", ""))
    except (ValueError, OverflowError):
        return None
    return -v if m.group(0).startswith("-") else v


def _clean(text: str) -> str:
    text = _TOOL_VERSION.sub(" ", _URL.sub(" ", _CODE_SPAN.sub(" ", text)))
    return _VERSION.sub(" ", text)


def _numbers_at(text: str) -> list[tuple[str, float, str]]:
    """(as written, value, the words around it) in already cleaned text."""
    out = []
    for m in NUMBER_RE.finditer(text):
        v = _value(m)
        if v is not None and math.isfinite(v):
            around = text[max(0, m.start() - 40) : m.end() + 40].lower()
            out.append((m.group(0).strip(), v, around))
    return out


def _same(a: float, b: float) -> bool:
    return a == b or abs(a) == abs(b) or math.isclose(abs(a), abs(b), rel_tol=1e-9)


@functools.cache
def allowlist() -> tuple[tuple[float, tuple[str, ...], str], ...]:
    """(value, words one of which must be near it (empty: any context), reason)."""
    import yaml

    raw = resources.files("kbase.data").joinpath("number_allowlist.yaml").read_text("utf-8")
    data = yaml.safe_load(raw) or {}
    out = []
    for item in data.get("numbers", []):
        near = tuple(str(w).lower() for w in item.get("near") or ())
        out.append((float(item["value"]), near, str(item["reason"])))
    return tuple(out)


def backing_values(claims) -> list[float]:
    return [
        v for c in claims for f in (c.text, c.expect or "") for _, v, _ in _numbers_at(_clean(f))
    ]


def _backed(v: float, around: str, backed: list[float]) -> bool:
    return any(_same(v, b) for b in backed) or any(
        _same(v, a) and (not near or any(w in around for w in near)) for a, near, _ in allowlist()
    )


def body_lines(text: str) -> list[tuple[int, str]]:
    """(file line, prose) for the body of a SKILL.md: no front-matter, no fenced code."""
    lines = text.split("\n")
    out: list[tuple[int, str]] = []
    ends = (i + 1 for i in range(1, len(lines)) if lines[i].strip() in ("---", "..."))
    start = next(ends, 0) if lines[0].strip() == "---" else 0
    fence: str | None = None
    in_comment = False
    for i in range(start, len(lines)):
        s = lines[i].strip()
        if fence:
            fence = None if s.startswith(fence) else fence
            continue
        if s.startswith("```") or s.startswith("~~~"):
            fence = s[:3]
            continue
        if in_comment or s.startswith("<!--"):
            in_comment = "-->" not in s
            continue
        if _LIST_NUM.match(lines[i]):
            s = _LIST_NUM.sub("", lines[i], count=1)
        out.append((i + 1, s))
    return out


def prose_places(skill, *, triggers: bool = False) -> list[tuple[int, str, str]]:
    """(SKILL.md line, field, text) of the front-matter prose: the description, the triggers (when
    asked), the steps and each failure mode's symptom, cause and fix."""
    m, d = skill.meta, skill.doc
    out = [(d.line_of(("description",)), "description", m.description)]
    if triggers:
        out += [(d.line_of(("trigger", i)), f"trigger.{i}", t) for i, t in enumerate(m.trigger)]
    out += [(d.line_of(("steps", i)), f"steps.{i}", s) for i, s in enumerate(m.steps)]
    out += [
        (d.line_of(("failure_modes", i, part)), f"failure_modes.{i}.{part}", getattr(fm, part))
        for i, fm in enumerate(m.failure_modes)
        for part in ("symptom", "cause", "fix")
    ]
    return out


def unbacked_numbers(skill) -> list:
    """kbase.schema.Problem per unbacked number, with the line it is on."""
    from kbase.schema import Problem

    backed = backing_values(getattr(skill.meta, "claims", []) or [])
    places = prose_places(skill)
    places += [(n, "body", text) for n, text in body_lines(skill.text)]
    problems = []
    for line, where, text in places:
        seen: set[str] = set()
        for written, v, around in _numbers_at(_clean(text)):
            if written in seen or _backed(v, around, backed):
                continue
            seen.add(written)
            msg = f"{written} in {where} is not backed by a claim (claims: text/expect) "
            msg += "or kbase/data/number_allowlist.yaml"
            p = Problem(path=skill.path, line=line, field="unbacked-number", message=msg)
            problems.append(p)
    return problems


# --------------------------------------------------------------------------- narration

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


def _narration_places(skill) -> list[tuple[int, str, str]]:
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
    for line, where, text in _narration_places(skill):
        if found := narration_in(text):
            said = "; ".join(repr(f) for f in found)
            msg = f"{where} narrates runs ({said}): state what holds and declare where (when: "
            msg += "gpu/arch/triton); `kbase get` renders the measured values from the ledger"
            kind = "ledger-narration"
            p = Problem(path=skill.path, line=line, field=where, code=kind, message=msg)
            problems.append(p)
    return problems
