"""What a question asks for, beyond its words: the error lines of a pasted log, English for its
Chinese terms, the concepts behind its API names, a date range, an intent, and the texts each
retriever should see (issue #11: dates, "first"/"broke" intents, abbreviations, compound names;
issue #25: logs and API names).
Dates become a soft prior (a fusion feature), not a hard filter: "fixed in early 2024" is often
off by a month, and skills have no date at all."""

from __future__ import annotations

import calendar
import functools
import re
from dataclasses import dataclass, field

from kbase.retrieval import tokenize as T

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MONTHS["sept"] = 9
_MONTH_RX = "|".join(sorted(_MONTHS, key=len, reverse=True))
_YEAR = r"(20[12]\d)"
_PART = {"early": (1, 4), "mid": (5, 8), "late": (9, 12), "end of": (10, 12)}
_Q = {"q1": (1, 3), "q2": (4, 6), "q3": (7, 9), "q4": (10, 12)}

_DATE_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(rf"\b{_YEAR}-(\d{{2}})-(\d{{2}})\b"), "day"),
    (re.compile(rf"\b{_YEAR}-(\d{{2}})\b"), "ym"),
    (re.compile(rf"{_YEAR}\s*年\s*(\d{{1,2}})\s*月"), "ym"),
    (re.compile(rf"\b({_MONTH_RX})\.?\s+{_YEAR}\b", re.I), "month-year"),
    (re.compile(rf"\b(q[1-4])\s+{_YEAR}\b", re.I), "quarter"),
    (re.compile(rf"\b(early|mid|late|end of)[\s-]+{_YEAR}\b", re.I), "part"),
    (re.compile(rf"\b(since|after|before|until|prior to)\s+{_YEAR}\b", re.I), "open"),
    (re.compile(rf"{_YEAR}\s*年(以前|之前|以后|之后)?"), "zh-year"),
    (re.compile(rf"\b{_YEAR}\b"), "year"),
]

FIRST_WORDS = re.compile(
    r"\b(first|initial(ly)?|introduc\w*|original|earliest|start(ed)? (using|supporting)|"
    r"bring-?up|when (was|did)\b.*\b(add|added|land|landed|support|supported|introduced))\b"
    r"|最早|第一次|首次|引入|什么时候加|何时加入",
    re.I,
)
FIX_WORDS = re.compile(
    r"\b(broke|broken|breaks|regress\w*|crash\w*|hang\w*|wrong|bug\w*|fix\w*|fail\w*|nan|"
    r"error|illegal|segfault|deadlock)\b|回退|回滚|崩溃|修复|错误|死循环",
    re.I,
)
REVERT_WORDS = re.compile(r"\b(revert\w*|roll(ed)? ?back|backed out)\b|回滚|撤销", re.I)


# ---------------------------------------------------------------- pasted logs
# A pasted traceback or log, reduced to what identifies the failure (issue #25): its error lines
# and the names in them. A long query is mostly frames, prompts and timestamps (`File ".../torch/
# nn/modules/module.py", line 1751`, `^^^^^`, `ERROR 07-24 11:08:41 [core.py:636]`); BM25 and
# the embedding model weigh those words like any other and drown the line that says what went
# wrong.
# A query this short, on one line, is already what a person typed; nothing to strip.
SHORT = 240

_ERROR_LINE = re.compile(
    r"(error|exception|assert|fail|fatal|abort|illegal|invalid|misaligned|out of (memory|resource)"
    r"|nan\b|\binf\b|segmentation|core dumped|warning|unsupported|undefined|not supported"
    r"|no kernel image|cannot|can't|mismatch|exceed|overflow|timeout|hang|deadlock|oom\b)",
    re.I,
)
_FRAME = re.compile(r'^\s*(File "[^"]*", line \d+|at [\w.$<>]+\(|#\d+\s+0x)', re.I)
_CARETS = re.compile(r"^[\s^~|_\-=*+.]*$")
_NOISE_LINE = re.compile(
    r"^\s*(Traceback \(most recent call last\)|During handling of the above exception"
    r"|The above exception was the direct cause|\.\.\.|\[\.\.\.\]|Compile with `TORCH_USE_CUDA_DSA`"
    r"|For debugging consider passing CUDA_LAUNCH_BLOCKING)",
    re.I,
)
# Log prefixes: "ERROR 07-24 11:08:41 [core.py:636]", "(EngineCore_DP0 pid=86)", "[rank0]:",
# "2025-02-05 21:40:57,123 -", "[16:10:33] stdout/INFO", "Dec 09 13:35:40 host name[206214]:"
_PREFIXES = [
    re.compile(r"\((?:\w+ )?(?:\w+_)*\w+ pid=\d+\)\s*"),
    re.compile(r"\[rank\d+\]:?\s*"),
    re.compile(
        r"\b(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s+"
        r"\d\d-\d\d \d\d:\d\d:\d\d\s*(\[[^\]]*\])?\s*"
    ),
    re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\s*(?:-\s*)?"),
    re.compile(r"\[\d\d:\d\d:\d\d\]\s*"),
    re.compile(r"^[A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \S+ [\w.-]+\[\d+\]:\s*"),
    re.compile(r"\[TP\d+\]\s*|\(\w*Worker\w* [^)]*\)\s*"),
]
_PATH = re.compile(r"(?:/[\w.+-]+){2,}/([\w.+-]+)")  # keep a path's last component
_HEX = re.compile(r"\b0x[0-9a-fA-F]{6,}\b")
_THREAD_COORDS = re.compile(r"block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\]\s*")


def _clean(line: str) -> str:
    for rx in _PREFIXES:
        line = rx.sub("", line)
    line = _THREAD_COORDS.sub("", line)
    line = _HEX.sub("", _PATH.sub(r"\1", line))
    return re.sub(r"\s+", " ", line).strip()


def distill(query: str) -> str:
    """The error lines of a pasted log (cleaned, each once, in order) plus the free text around
    them; the query itself when it is short or has no recognisable error line."""
    if len(query) <= SHORT and "\n" not in query:
        return query
    kept: list[str] = []
    seen: set[str] = set()
    prose: list[str] = []
    for raw in query.splitlines():
        if _FRAME.match(raw) or _CARETS.match(raw) or _NOISE_LINE.match(raw):
            continue
        line = _clean(raw)
        if not line or line in seen:
            continue
        seen.add(line)
        if _ERROR_LINE.search(line):
            kept.append(line)
        elif not re.search(r"[=(){}\[\];]|^\s*(return|def|import|from)\b", raw) and len(line) > 3:
            prose.append(line)  # a sentence the person wrote, not a code line
    if not kept:
        return re.sub(r"\s+", " ", " ".join(prose)).strip() or query
    # The last error line is usually the one raised; keep a few of them and the person's words.
    out = " ".join([*prose[:3], *kept[-4:]])
    return out[:1200]


# ---------------------------------------------------------------- Chinese terms
# Bilingual expansion from kbase/data/glossary.yaml (EN <-> ZH GPU-kernel terms): the embedding
# model is English-only and the corpus is written in English, so a Chinese query is translated
# term by term before it reaches either index.
@dataclass(frozen=True)
class Expansion:
    lexical: str  # original query plus English (and alias) terms, for BM25
    dense: str  # query with Chinese terms replaced by English, for the embedding model
    added: tuple[str, ...]


@functools.cache
def _tables() -> tuple[list[tuple[str, str]], dict[str, str]]:
    data = T.read_data("glossary.yaml")
    zh_pairs: list[tuple[str, str]] = []
    aliases: dict[str, str] = {}
    for item in data.get("terms", []):
        en = str(item["en"]).strip()
        for zh in item.get("zh") or []:
            zh_pairs.append((str(zh).strip(), en))
        for al in item.get("aliases") or []:
            aliases[str(al).strip().lower()] = en
    zh_pairs.sort(key=lambda p: -len(p[0]))  # longest match first: 共享内存 before 内存
    return zh_pairs, aliases


_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_\-]*")


def expand(query: str) -> Expansion:
    zh_pairs, aliases = _tables()
    added: list[str] = []
    dense = query
    if any("\u3400" <= ch <= "\u9fff" for ch in query):
        remaining = query
        for zh, en in zh_pairs:
            if zh and zh in remaining:
                remaining = remaining.replace(zh, " ")
                dense = dense.replace(zh, f" {en} ")
                if en not in added:
                    added.append(en)
    for w in _WORD.findall(query):
        alias = aliases.get(w.lower())
        if alias and alias not in added:
            added.append(alias)
    if added:
        # leftover CJK particles only add [UNK] noise to an English-only embedding model
        dense = re.sub(r"[\u3400-\u9fff\uff00-\uffef\u3000-\u303f]+", " ", dense)
    dense = re.sub(r"\s+", " ", dense).strip() or query
    lexical = query if not added else f"{query} {' '.join(added)}"
    return Expansion(lexical=lexical, dense=dense, added=tuple(added))


# ---------------------------------------------------------------- API names
# Library API names in a question, mapped to the concepts they stand for (kbase/data/
# api_aliases.yaml, issue #25): "flash_attn_varlen_func returns NaN" also searches for packed
# variable-length sequences, so the failure decides the rank rather than which skill names the
# API. The same file's symptom cues add a cause's words to phrasings that imply it ("fine when
# the dims are divisible by 64" -> a missing tail mask).
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@functools.cache
def _aliases() -> tuple[dict[str, str], list[tuple[str, str]], list[tuple[re.Pattern[str], str]]]:
    """(lower-case name -> concepts, [(lower-case prefix, concepts)] for names ending in *,
    [(symptom cue, concepts)])."""
    data = T.read_data("api_aliases.yaml")
    exact: dict[str, str] = {}
    prefixes: list[tuple[str, str]] = []
    for item in data.get("aliases", []):
        concepts = str(item["concepts"]).strip()
        for name in item["names"]:
            # A CamelCase class name (RMSNorm) matches only as written, so the plain word
            # "rmsnorm" stays a word; snake_case and dotted names match in any case.
            name = str(name).strip()
            name = name if any(c.isupper() for c in name) else name.lower()
            if name.endswith("*"):
                prefixes.append((name[:-1], concepts))
            else:
                exact[name] = concepts
    cues = [(re.compile(c["pattern"], re.I), str(c["concepts"])) for c in data.get("cues", [])]
    return exact, prefixes, cues


def concepts_for(text: str) -> list[str]:
    """The concept phrases of every API name and symptom cue in `text`, each once."""
    exact, prefixes, cues = _aliases()
    out: list[str] = [c for rx, c in cues if rx.search(text)]
    for ident in _IDENT.findall(text):
        parts = ident.split(".")
        tails = [".".join(parts[i:]) for i in range(len(parts))]
        forms = tails + [f.lower() for f in tails]
        hit = next((exact[f] for f in forms if f in exact), None)
        if hit is None:
            hit = next((c for p, c in prefixes if any(f.startswith(p) for f in forms)), None)
        if hit is not None and hit not in out:
            out.append(hit)
    return out


@dataclass
class QueryPlan:
    query: str
    text: str  # the query without its date expression
    lexical: str  # for BM25: text + glossary (Chinese → English) terms
    dense: str  # for the embedding model: translated, abbreviations spelled out, camel case split
    since: str | None = None
    until: str | None = None
    intent_first: bool = False
    intent_fix: bool = False
    intent_revert: bool = False
    groups: list[int] = field(default_factory=list)


def _month_end(y: int, m: int) -> str:
    return f"{y:04d}-{m:02d}-{calendar.monthrange(y, m)[1]:02d}"


def parse_dates(query: str) -> tuple[str, str | None, str | None]:
    """(query without the first date expression, since, until); dates inclusive, YYYY-MM-DD."""
    for rx, kind in _DATE_PATTERNS:
        m = rx.search(query)
        if not m:
            continue
        g = m.groups()
        since = until = None
        if kind == "day":
            since = until = f"{g[0]}-{g[1]}-{g[2]}"
        elif kind in ("ym", "month-year"):
            y, mo = (int(g[0]), int(g[1])) if kind == "ym" else (int(g[1]), _MONTHS[g[0].lower()])
            if not 1 <= mo <= 12:
                continue
            since, until = f"{y:04d}-{mo:02d}-01", _month_end(y, mo)
        elif kind in ("quarter", "part"):
            a, b = (_Q if kind == "quarter" else _PART)[g[0].lower()]
            y = int(g[1])
            since, until = f"{y:04d}-{a:02d}-01", _month_end(y, b)
        elif kind == "open":
            y = int(g[1])
            if g[0].lower() in ("since", "after"):
                since = f"{y:04d}-01-01" if g[0].lower() == "since" else f"{y + 1:04d}-01-01"
            else:
                until = f"{y - 1:04d}-12-31"
        elif kind == "zh-year":
            y = int(g[0])
            if g[1] in ("以前", "之前"):
                until = f"{y - 1:04d}-12-31"
            elif g[1] in ("以后", "之后"):
                since = f"{y:04d}-01-01"
            else:
                since, until = f"{y:04d}-01-01", f"{y:04d}-12-31"
        else:  # a bare year
            since, until = f"{g[0]}-01-01", f"{g[0]}-12-31"
        rest = (query[: m.start()] + " " + query[m.end() :]).strip()
        rest = re.sub(r"\b(in|during|from|of)\s*$", "", rest).strip() or query
        return re.sub(r"\s+", " ", rest), since, until
    return query, None, None


def _split_camel(text: str) -> str:
    """BatchPrefillWithPagedKVCache → Batch Prefill With Paged KV Cache, for the embedding model."""

    def one(m: re.Match[str]) -> str:
        w = m.group(0)
        parts = T.CAMEL.findall(w)
        return " ".join(parts) if len(parts) > 2 else w

    return re.sub(r"\b[A-Za-z][a-z0-9]*[A-Z][A-Za-z0-9]*\b", one, text)


_PLAIN_WORDS = frozenset({"fix", "bug", "hang", "hangs", "stuck", "faster", "perf", "bench", "ci"})


def _is_abbreviation(token: str, text: str) -> bool:
    """Typed in capitals (EPLB), mixing letters and digits (fa3, sm90), or a short lowercase
    acronym (mla): the embedding model needs the long form next to it."""
    if token in _PLAIN_WORDS or not token.isascii() or "." in token or "_" in token:
        return False
    m = re.search(rf"(?<![A-Za-z0-9]){re.escape(token)}(?![A-Za-z0-9])", text, re.I)
    surface = m.group(0) if m else token
    return surface.isupper() or any(c.isdigit() for c in surface) or len(surface) <= 4


def plan(query: str) -> QueryPlan:
    # A pasted traceback or log: its error lines and names only (distill).
    text, since, until = parse_dates(distill(query))
    api = concepts_for(text)  # API names -> the concepts they stand for (api_aliases.yaml)
    exp = expand(text)
    base = T.base_tokens(exp.lexical)
    groups = T.matched_groups(base)
    dense = _split_camel(exp.dense)
    # Spell out abbreviations for the embedding model, which has never seen "EPLB" or "MTP".
    low = dense.lower()
    extra = []
    for g, start, length in T.matched_spans(base):
        canonical = T.group_forms(g)[0]
        if length == 1 and _is_abbreviation(base[start], text) and canonical.lower() not in low:
            if canonical not in extra:
                extra.append(canonical)
    if extra:
        dense = f"{dense} ({'; '.join(extra)})"
    if api:
        dense = f"{dense} ({'; '.join(api)})"
    lexical = f"{exp.lexical} {' '.join(api)}" if api else exp.lexical
    first, fix, revert = (bool(rx.search(query)) for rx in (FIRST_WORDS, FIX_WORDS, REVERT_WORDS))
    return QueryPlan(query, text, lexical, dense, since, until, first, fix, revert, groups)
