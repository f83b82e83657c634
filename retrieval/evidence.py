"""What identifies a failure in a skill (issue #25): the chunks a person's error text should be
matched against (its triggers and failure modes, not its steps and notes), and each trigger,
symptom and cause line as a token set, so a query that repeats an error line verbatim is recognised
as such rather than scored like any topical overlap.

Read once per generation and skill, when the skill first shows up among a search's candidates:
the entry is decoded and its trigger and failure-mode texts filled (a few dozen small skills, not
the whole archive).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from kbase.retrieval.tokenize import STOPWORDS, base_tokens

IDENT_SECTIONS = frozenset({"trigger", "failure_modes"})
_LINE_HEAD = re.compile(r"^\s*-?\s*(?:literal:\s*|symptom:\s*|cause:\s*)?")
_CAUSE = re.compile(r"^\s*cause:", re.I)
_FIX = re.compile(r"^\s*fix:", re.I)


@dataclass(frozen=True)
class SkillFacts:
    ident: np.ndarray  # chunk positions (into the generation's chunks) of identifying sections
    # (trigger/symptom/cause line, its tokens, the sum of their idf)
    lines: tuple[tuple[str, frozenset[str], float], ...]
    use_when: str  # the description's first sentence
    vocab: frozenset[str] = frozenset()  # every word of its summary, triggers and failure modes


NONE = SkillFacts(np.zeros(0, dtype=np.int64), (), "", frozenset())


def words(text: str) -> frozenset[str]:
    """The tokens that can identify something: no stopwords, no single characters."""
    return frozenset(t for t in base_tokens(text) if len(t) > 1 and t not in STOPWORDS)


def first_sentence(text: str, limit: int = 160) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    m = re.search(r"(?<=[a-z0-9)\]'\"`])([.;]|:(?=\s))(\s|$)", flat)
    if m and m.start() < limit:
        return flat[: m.start()] + ("." if m.group(1) != "." else ".")
    return flat if len(flat) <= limit else flat[:limit].rstrip() + "…"


def _lines(section: str, text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        if section == "failure_modes" and _FIX.match(raw):
            continue  # the fix says what to do, not what the failure looks like
        line = _LINE_HEAD.sub("", raw).strip().strip('"')
        if len(line) > 8:
            out.append(line)
    return out


def facts(idx, e: int) -> SkillFacts:
    """The identifying chunks and lines of entry e of the generation (NONE for a PR card)."""
    cache = idx.evidence
    got = cache.get(e)
    if got is not None:
        return got
    if idx.kind[e] != "skill":
        cache[e] = NONE
        return NONE
    entry = idx.entries[e]
    idx.fill_texts([entry])
    idf = idx.lexical.idf
    start = int(idx.chunk_start[e])
    ident, lines, use_when = [], [], ""
    vocab: set[str] = set()
    for j, c in enumerate(entry.chunks):
        if c.section == "summary":
            parts = c.text.split("\n", 2)
            use_when = first_sentence(parts[1] if len(parts) > 1 else c.text)
            vocab |= words(c.text)
        if c.section in IDENT_SECTIONS:
            ident.append(start + j)
            vocab |= words(c.text)
            for line in _lines(c.section, c.text):
                toks = words(line)
                lines.append((line, toks, sum(idf(w) for w in toks)))
    got = SkillFacts(np.asarray(ident, dtype=np.int64), tuple(lines), use_when, frozenset(vocab))
    cache[e] = got
    return got


# The weight of the two extra words in the denominator of a line's coverage: about a typical
# word's idf, so a two-word line never counts as a verbatim match.
PAD_IDF = 3.0


def coverage(query: dict[str, float], line: frozenset[str], weight: float) -> float:
    """How much of one trigger/symptom line the query repeats, each word weighed by its idf
    (`query`: word -> idf; `weight`: the line's idf sum). A rare word of an error line
    (JITFunction, satfinite) says more than "kernel" or "cuda", which half the skills use; on the
    tune halves this beat counting words alike under cross-validation (real problems MRR 0.935
    -> 0.944, skill questions 0.918 -> 0.935)."""
    if not weight:
        return 0.0
    return sum(query[w] for w in line if w in query) / (weight + 2 * PAD_IDF)


def explained(query: frozenset[str], f: SkillFacts) -> float:
    """Share of the question's words the skill's own summary, triggers and failure modes use:
    low for every skill when the question is about something the knowledge base lacks."""
    return len(query & f.vocab) / len(query) if query else 0.0


def best_line(query: dict[str, float], f: SkillFacts) -> tuple[float, str]:
    best, text = 0.0, ""
    for line, toks, weight in f.lines:
        c = coverage(query, toks, weight)
        if c > best:
            best, text = c, line
    return best, text


def use_when(c) -> str:
    """One line saying when a candidate applies: a skill's first description sentence, a PR
    card's title (both already at hand: no chunk text is read for a PR card)."""
    if c.kind == "skill" and c.source is not None and c.position >= 0:
        got = facts(c.source, c.position).use_when
        if got:
            return got
    return first_sentence(c.entry.title)


def add_features(idx, text: str, order: list[int], X, col, chunk_scores, top: float) -> list[str]:
    """Skills only: fill the identifying-chunk BM25, trigger-line coverage and explained-words
    features of pool rows `order` in X (issue #25); returns each row's best-matching line."""
    matched = [""] * len(order)
    if not order or not (idx.kind[order] == "skill").any():
        return matched
    qwords = words(text)
    qidf = {w: idx.lexical.idf(w) for w in qwords}
    for r, e in enumerate(order):
        if idx.kind[e] != "skill":
            continue
        f = facts(idx, e)
        if chunk_scores is not None and f.ident.size and top > 0:
            X[r, col["ident"]] = float(chunk_scores[f.ident].max()) / top
        X[r, col["trig_cover"]], matched[r] = best_line(qidf, f)
        X[r, col["explained"]] = explained(qwords, f)
    return matched
