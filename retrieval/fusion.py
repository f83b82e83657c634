"""The hybrid ranker: a linear score over a few signals per candidate entry, with weights fitted on
the tuning halves of the hand-written dev sets (bench/fit_fusion.py writes kbase/data/fusion.yaml).
Signals: BM25 and dense evidence (normalised score and reciprocal rank), how much of the question
the title covers, and priors that only fire when the question asks for them (the oldest feature PR
for "first"/"introduced", fixes and reverts for "broke"/"regression", a date range).

Skill evidence: what identifies a failure in a skill (issue #25): the chunks a person's error text
should be matched against (its triggers and failure modes, not its steps and notes), and each
trigger, symptom and cause line as a token set, so a query that repeats an error line verbatim is
recognised as such rather than scored like any topical overlap. Made when a skill first shows up
among a search's candidates, and stored beside the generation for later processes (State)."""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from kbase.retrieval.tokenize import STOPWORDS, base_tokens, read_data

FEATURES = (
    "bm25",  # BM25 score / best BM25 score among the candidates
    "bm25_rr",  # 1 / (RR_K + rank) in the BM25 list
    "dense",  # cosine rescaled to [0, 1] over the dense list
    "dense_rr",  # 1 / (RR_K + rank) in the dense list
    "dense_code",  # dense_rr x share of code-like words in the question
    "title",  # share of the question's words (and concepts) found in a PR card's title
    "first_feature",  # question says first/introduced and the PR is a feature
    "oldest",  # question says first/introduced: 1 for the oldest dated candidate .. 0 newest
    "fix",  # question says broke/regression/crash and the PR is a fix or a revert
    "revert",  # question says reverted and the PR is a revert
    "in_range",  # question names a date and the entry's date is in it
    "out_range",  # question names a date and the entry is dated outside it
    "ident",  # skills: best BM25 of a trigger/failure-mode chunk / best BM25 among the candidates
    "trig_cover",  # skills: share of the trigger/symptom line the question repeats most
    "dense_raw",  # cosine of the best chunk itself (not rescaled): how close, not only the rank
    "explained",  # skills: share of the question's words the skill's identifying text uses
    "bm25_level",  # log(1 + raw BM25) / log(1 + the question's word count): how much, not rank
)
RR_K = 5
# The weights of the old reciprocal-rank fusion: the fallback when no fitted file exists.
DEFAULT_WEIGHTS = {"bm25_rr": 2.0, "dense_rr": 1.0}
_FIX = frozenset({"fix", "revert"})
_CODE_WORD = re.compile(r"[A-Za-z0-9]_[A-Za-z0-9]|[a-z][A-Z]|\w\.\w|/|::|\(\)")


def code_share(query: str) -> float:
    words = query.split()
    return sum(bool(_CODE_WORD.search(w)) for w in words) / max(1, len(words))


@functools.cache
def fitted() -> dict:
    """kbase/data/fusion.yaml as a dict; {} when absent."""
    return read_data("fusion.yaml")


# The per-hit confidence model (fitted by bench/fit_fusion.py): a logistic regression over these
# values of a candidate, the probability that it fixes the question; `no_good_match` when the best
# candidate's probability is under the fitted threshold. The fused score and the BM25 share are
# relative to the other candidates: on a question the knowledge base lacks, some skill still tops
# the list. bm25_level is absolute (scaled by the question's length), and separated covered from
# uncovered tuning questions better under cross-validation (AUC 0.85 -> 0.87).
CONF_FEATURES = ("score", "lead", "trig_cover", "dense_raw", "ident", "explained", "bm25_level")


def confidence_features(X: np.ndarray, s: np.ndarray) -> np.ndarray:
    """(n, len(CONF_FEATURES)) for pool rows with feature rows X and fused scores s."""
    if s.size > 1:
        top2 = np.partition(s, -2)[-2:]
        other = np.where(s >= top2[1], top2[0], top2[1])  # best score among the others
    else:
        other = np.zeros_like(s)
    # the fused score and its lead, then the feature columns CONF_FEATURES names
    return np.column_stack([s, s - other, X[:, [FEATURES.index(f) for f in CONF_FEATURES[2:]]]])


def confidence_model() -> tuple[np.ndarray, float, float] | None:
    """(coefficients, bias, no-good-match threshold) from fusion.yaml; None before a fit."""
    m = fitted().get("confidence")
    if not m:
        return None
    # a feature the fit predates weighs nothing (the fit is re-run after features change)
    coef = np.asarray([float(m["coef"].get(f, 0.0)) for f in CONF_FEATURES], dtype=np.float64)
    return coef, float(m["bias"]), float(m["threshold"])


def confidences(F_: np.ndarray) -> np.ndarray:
    model = confidence_model()
    if model is None:  # no fit yet: the raw cosine is the least bad stand-in
        return np.clip(F_[:, 3], 0.0, 1.0)
    coef, bias, _ = model
    return 1.0 / (1.0 + np.exp(-(F_ @ coef + bias)))


def weights_vector(weights: dict[str, float] | None = None) -> np.ndarray:
    w = weights if weights is not None else (fitted().get("weights") or DEFAULT_WEIGHTS)
    unknown = set(w) - set(FEATURES)
    if unknown:
        raise ValueError(f"unknown fusion features {sorted(unknown)}; known: {FEATURES}")
    return np.asarray([float(w.get(f, 0.0)) for f in FEATURES], dtype=np.float64)


def add_priors(qp, order: list[int], rows: dict[int, int], X, col, dates, categories) -> None:
    """The priors a question asks for (first/introduced, broke/regression, reverted, a date
    range) into feature rows X of pool entries `order` (rows: entry -> row)."""
    if qp.intent_first:
        dated = sorted((dates[e] or "", e) for e in order if dates[e])
        n = max(1, len(dated) - 1)
        for r, (_, e) in enumerate(dated):
            X[rows[e], col["oldest"]] = 1.0 - r / n
        for e in order:
            if "feature" in categories[e]:
                X[rows[e], col["first_feature"]] = 1.0
    if qp.intent_fix or qp.intent_revert:
        for e in order:
            cats = set(categories[e])
            if qp.intent_fix and cats & _FIX:
                X[rows[e], col["fix"]] = 1.0
            if qp.intent_revert and "revert" in cats:
                X[rows[e], col["revert"]] = 1.0
    if qp.since or qp.until:
        for e in order:
            d = (dates[e] or "")[:10]
            if not d:
                continue
            inside = (not qp.since or d >= qp.since) and (not qp.until or d <= qp.until)
            X[rows[e], col["in_range" if inside else "out_range"]] = 1.0


# ---------------------------------------------------------------------------- skill evidence
IDENT_SECTIONS = frozenset({"trigger", "failure_modes"})
_LINE_HEAD = re.compile(r"^\s*-?\s*(?:literal:\s*|symptom:\s*|cause:\s*)?")
_FIX_LINE = re.compile(r"^\s*fix:", re.I)
_NO_IDS = np.zeros(0, dtype=np.int64)


@dataclass(frozen=True)
class SkillFacts:
    ident: np.ndarray  # chunk positions (into the generation's chunks) of identifying sections
    # (trigger/symptom/cause line, its tokens, the sum of their idf)
    lines: tuple[tuple[str, frozenset[str], float], ...]
    use_when: str  # the description's first sentence
    vocab: frozenset[str]  # every word of its summary, triggers and failure modes
    # The same as ids of the generation's evidence word table (State.words), so
    # that a search scores every candidate's lines in a few numpy passes (a Python loop over
    # ~130 candidates' lines was 5-9 ms of a warm search): each line's word ids end to end, how
    # many each line has, each line's idf sum, and the ids of `vocab`.
    line_ids: np.ndarray
    line_len: np.ndarray
    weights: np.ndarray
    vocab_ids: np.ndarray


NONE = SkillFacts(_NO_IDS, (), "", frozenset(), _NO_IDS, _NO_IDS, np.zeros(0), _NO_IDS)


def words(text: str) -> frozenset[str]:
    """The tokens that can identify something: no stopwords, no single characters."""
    return frozenset(t for t in base_tokens(text) if len(t) > 1 and t not in STOPWORDS)


def first_sentence(text: str, limit: int = 160) -> str:
    flat = re.sub(r"\s+", " ", text).strip()
    m = re.search(r"(?<=[a-z0-9)\]'\"`])([.;]|:(?=\s))(\s|$)", flat)
    if m and m.start() < limit:
        return flat[: m.start()] + "."
    return flat if len(flat) <= limit else flat[:limit].rstrip() + "…"


def _lines(section: str, text: str) -> list[str]:
    out = []
    for raw in text.splitlines():
        if section == "failure_modes" and _FIX_LINE.match(raw):
            continue  # the fix says what to do, not what the failure looks like
        line = _LINE_HEAD.sub("", raw).strip().strip('"')
        if len(line) > 8:
            out.append(line)
    return out


CACHE_FILE = "evidence-1.json"  # in the generation's folder; bump when a row's meaning changes
# Rows made before the file is written again: a first search makes ~140 at once, and rewriting the
# whole file (~1 MB at 200 skills) for each skill a warm server meets later costs more than a
# later process making the few that are missing (~3 ms each).
SAVE_AT = 8


class State:
    """A generation's skill facts: those made in this process (entry -> SkillFacts), the word table
    their arrays index, and the rows a process stored in CACHE_FILE. Making the facts of the ~140
    skills a first search meets (tokenizing every trigger and failure-mode line) was most of a cold
    `kbase search` once skills had ~10 triggers each; reading them back takes a few milliseconds."""

    def __init__(self, path: Path):
        self.path = path / CACHE_FILE
        self.facts: dict[int, SkillFacts] = {}
        self.words: dict[str, int] = {}
        self.fresh: dict[str, dict] = {}  # rows made here and not stored yet
        try:
            stored = json.loads(self.path.read_bytes())
        except (OSError, ValueError):
            stored = {}
        self.stored: dict[str, dict] = stored if isinstance(stored, dict) else {}

    def save(self) -> None:
        """Store every row known now (atomically; a read-only or vanished folder is skipped)."""
        self.stored, self.fresh = {**self.stored, **self.fresh}, {}
        try:
            fd, tmp = tempfile.mkstemp(prefix=f".{CACHE_FILE}.", dir=self.path.parent)
            with os.fdopen(fd, "wb") as fh:
                fh.write(json.dumps(self.stored).encode("ascii"))
            os.chmod(tmp, 0o644)  # like the generation's other files
            os.replace(tmp, self.path)
        except OSError:
            pass


_LOCK = threading.Lock()


def state(idx) -> State:
    if idx.evidence is None:
        with _LOCK:
            if idx.evidence is None:
                idx.evidence = State(idx.path)
    return idx.evidence


def facts(idx, e: int) -> SkillFacts:
    """The identifying chunks and lines of entry e of the generation (NONE for a PR card)."""
    st = state(idx)
    got = st.facts.get(e)
    if got is not None:
        return got
    if idx.kind[e] != "skill":
        st.facts[e] = NONE
        return NONE
    eid = idx.entries.ids[e]
    row = st.stored.get(eid)
    try:
        got = _from_row(st, row) if row is not None else None
    except (KeyError, TypeError, ValueError):  # a damaged cache file: make the facts anew
        got = None
    if got is None:
        row = st.fresh[eid] = _row(idx, e)
        got = _from_row(st, row)
    st.facts[e] = got
    return got


def _row(idx, e: int) -> dict:
    """Entry e's facts as stored: identifying chunk positions, the lines with their words and
    idf sums, the use-when sentence and the vocabulary."""
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
                toks = sorted(words(line))  # summed in one order: a set's varies per process
                lines.append([line, toks, sum(idf(w) for w in toks)])
    return {"ident": ident, "lines": lines, "use_when": use_when, "vocab": sorted(vocab)}


def _from_row(st: State, row: dict) -> SkillFacts:
    lines = tuple((str(t), frozenset(map(str, ws)), float(w)) for t, ws, w in row["lines"])
    with _LOCK:  # two searches may meet new skills at once: one id per word
        vocab_ids = _ids(st.words, row["vocab"])
        by_line = [_ids(st.words, toks) for _, toks, _ in lines]
    return SkillFacts(
        np.asarray(row["ident"], dtype=np.int64),
        lines,
        str(row["use_when"]),
        frozenset(row["vocab"]),
        np.concatenate([_NO_IDS, *by_line]),
        np.asarray([len(i) for i in by_line], dtype=np.int64),
        np.asarray([w for _, _, w in lines], dtype=np.float64),
        vocab_ids,
    )


def _ids(table: dict[str, int], toks) -> np.ndarray:
    """The words' ids in the generation's evidence word table (new words get the next ids)."""
    return np.asarray([table.setdefault(t, len(table)) for t in toks], dtype=np.int64)


# A line's coverage is the idf sum of the question's words in it over the line's own idf sum plus
# two typical words (PAD_IDF each), so a two-word line never counts as a verbatim match. A rare
# word of an error line (JITFunction, satfinite) says more than "kernel" or "cuda", which half the
# skills use: on the tune halves idf beat counting words alike under cross-validation (real
# problems MRR 0.935 -> 0.944, skill questions 0.918 -> 0.935).
PAD_IDF = 3.0


def use_when(c) -> str:
    """One line saying when a candidate applies: a skill's first description sentence, a PR
    card's title (both already at hand: no chunk text is read for a PR card)."""
    if c.kind == "skill":
        got = facts(c.source, c.position).use_when
        if got:
            return got
    return first_sentence(c.entry.title)


_ARRAYS = ("ident", "line_ids", "line_len", "weights", "vocab_ids")


def _runs(op: np.ufunc, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """op (np.add, np.maximum) over consecutive runs of values of these lengths, 0 for an empty
    run (values are >= 0)."""
    starts = np.cumsum(lengths) - lengths
    # reduceat reads one element at an empty run's start: pad so that it exists, then zero it
    out = op.reduceat(np.append(values, values.dtype.type(0)), np.minimum(starts, values.size))
    return np.where(lengths > 0, out, 0)


def add_features(idx, text: str, order: list[int], X, col, chunk_scores, top: float) -> list[str]:
    """Skills only: fill the identifying-chunk BM25, trigger-line coverage and explained-words
    features of pool rows `order` in X (issue #25), every candidate's lines at once (SkillFacts);
    returns each row's best-matching line, its first line of the highest coverage above 0."""
    matched = [""] * len(order)
    rows = np.flatnonzero(idx.kind[order] == "skill") if order else np.zeros(0, np.int64)
    if not rows.size:
        return matched
    fs = [facts(idx, order[r]) for r in rows]
    st = state(idx)
    if len(st.fresh) >= SAVE_AT:
        st.save()  # for the next process's first search
    qwords = words(text)
    # word id -> idf of the question's words (a lookup table: one gather per array below)
    table = st.words
    qidf, qhas = np.zeros(len(table)), np.zeros(len(table))
    for w in qwords:
        i = table.get(w)
        if i is not None and i < qidf.size:  # (an id given since the table was sized is in no fs)
            qidf[i], qhas[i] = idx.lexical.idf(w), 1.0
    cols = {n: [getattr(f, n) for f in fs] for n in _ARRAYS}
    cat = {n: np.concatenate(got) for n, got in cols.items()}
    size = {n: np.asarray([a.size for a in got], dtype=np.int64) for n, got in cols.items()}
    if chunk_scores is not None and top > 0:
        best = _runs(np.maximum, chunk_scores[cat["ident"]], size["ident"])
        X[rows, col["ident"]] = best.astype(np.float64) / top
    weights, n_lines = cat["weights"], size["weights"]
    sums = _runs(np.add, qidf[cat["line_ids"]], cat["line_len"])
    cov = np.where(weights > 0, sums / (weights + 2 * PAD_IDF), 0.0)
    best = _runs(np.maximum, cov, n_lines)
    X[rows, col["trig_cover"]] = best
    owner = np.repeat(np.arange(len(fs)), n_lines)
    start = np.cumsum(n_lines) - n_lines
    for li in np.flatnonzero((cov > 0) & (cov == best[owner])).tolist():
        o = int(owner[li])
        if not matched[rows[o]]:  # the first of its best lines
            matched[rows[o]] = fs[o].lines[li - int(start[o])][0]
    if qwords:
        hits = _runs(np.add, qhas[cat["vocab_ids"]], size["vocab_ids"])
        X[rows, col["explained"]] = hits / len(qwords)
    return matched
