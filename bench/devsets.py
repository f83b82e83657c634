"""The hand-written dev sets of issue #11 (tests/eval/devset_*.yaml): loading, the fixed
tuning/test split, and Hit@1 / Hit@5 / MRR per search mode.

The split is a hash of the query text, so it never depends on file order and a question keeps its
half when others are added. Fusion weights are fitted on "tune" only; "test" is what we report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import yaml
from eval_scores import Scores as Score  # one score shape for every eval set
from eval_scores import score as score_rankings

SETS = {"prs": "devset_prs.yaml", "skills": "devset_skills.yaml"}
HALVES = ("tune", "test")


@dataclass
class DevQuery:
    query: str
    expected: list[str]
    set: str
    type: str = ""
    source: str = ""

    @property
    def half(self) -> str:
        return split_of(self.query)


def split_of(query: str) -> str:
    digest = hashlib.sha256(query.strip().encode("utf-8")).digest()
    return HALVES[digest[0] & 1]


def load(folder: Path, name: str) -> list[DevQuery]:
    """One dev set; a row without `query` or `expected` is an error naming file and row."""
    path = folder / SETS[name]
    rows = yaml.safe_load(path.read_text(encoding="utf-8")) or []
    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or not row.get("query") or not row.get("expected"):
            raise ValueError(f"{path}: row {i + 1} needs `query` and `expected`")
        exp = row["expected"]
        out.append(
            DevQuery(
                query=str(row["query"]),
                expected=[exp] if isinstance(exp, str) else [str(e) for e in exp],
                set=name,
                type=str(row.get("type", "")),
                source=f"{path.name}#{i + 1}",
            )
        )
    return out


def score(rows: list[tuple[DevQuery, list[str]]], depth: int = 10) -> Score:
    """Hit@1, Hit@5 and MRR over the top `depth` of each ranking (counted by evaluate.score)."""
    return score_rankings([ranked[:depth] for _, ranked in rows], [q for q, _ in rows])


def evaluate(
    search: Callable[[str, str], list[str]],
    queries: list[DevQuery],
    modes: Iterable[str],
) -> dict[str, dict[str, Score]]:
    """{mode: {half: Score}} where search(query, mode) returns entry ids best first."""
    out: dict[str, dict[str, Score]] = {}
    for mode in modes:
        ranked = [(q, search(q.query, mode)) for q in queries]
        out[mode] = {h: score([r for r in ranked if r[0].half == h]) for h in HALVES}
    return out


def known(queries: list[DevQuery], ids: set[str]) -> tuple[list[DevQuery], list[DevQuery]]:
    """Split into answerable queries (an expected id is indexed) and the rest."""
    ok = [q for q in queries if any(e in ids for e in q.expected)]
    return ok, [q for q in queries if q not in ok]
