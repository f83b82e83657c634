"""The real-problem question set of issue #25 (bench/realprobs.yaml): problems from public issue
threads, typed as engineers typed them, with the skills that fix each root cause (possibly none).

The split is by date and repository, not by row (see the file's header): a thread dated on or after
CUTOFF, or from a repository held out whole, is "test". `load` checks that every row follows it,
so a row cannot drift into the other half by hand-editing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml

CUTOFF = "2025-10-01"
HELD_OUT_REPOS = frozenset({"NVIDIA/cutlass", "fla-org/flash-linear-attention"})
KINDS = frozenset("error crash launch compile wrong-result nan numerics slowdown profiling".split())
MAX_QUERY = 300
# collection batches a row may name; a batch is a set of rows collected together under one rule
# (fresh-35: collected at stop 35 after all trigger writing; fresh-36: collected before the next
# ranking change, to measure it; nothing may be written from either)
BATCHES = frozenset({"fresh-35", "fresh-36"})
_REQUIRED = ("id", "repo", "url", "date", "kind", "query", "root_cause", "fixing", "split")


@dataclass(frozen=True)
class RealProblem:
    id: str
    repo: str
    url: str
    date: str
    kind: str
    query: str
    expected: tuple[str, ...]  # fixing skills; empty = no skill fixes it
    half: str
    source: str
    # no skill fixed it when the set was collected (the corpus may cover it since: fixing_new)
    uncovered_at_collection: bool = False
    # held back from trigger, alias and cue writing: they estimate how search does on new
    # problems (rows that triggers were written from score higher; bench/cv_fusion.py)
    calibration: bool = False
    batch: str = ""  # one of BATCHES, or "" for rows collected before batches were recorded
    # the query's literal error line already appears verbatim in some skill's trigger list
    # (None: not recorded), so figures can be reported with and without such rows
    literal_in_skill: bool | None = None

    @property
    def covered(self) -> bool:
        return bool(self.expected)


def split_for(date: str, repo: str) -> str:
    return "test" if date >= CUTOFF or repo in HELD_OUT_REPOS else "tune"


def _lines(text: str) -> list[int]:
    """1-based line of each top-level `- ` row, so an error names the line, not only the index."""
    return [i + 1 for i, line in enumerate(text.splitlines()) if line.startswith("- ")]


def load(path: Path, skills: set[str] | None = None) -> list[RealProblem]:
    """Every row, checked: required fields, kind, query length, the split rule, unique ids and URLs,
    and (when `skills` is given) that each skill in `fixing` and `fixing_new` exists. Errors name
    file, line and field."""
    text = path.read_text(encoding="utf-8")
    rows = yaml.safe_load(text) or []
    lines = _lines(text)
    out: list[RealProblem] = []
    seen: set[str] = set()
    for i, row in enumerate(rows):
        where = f"{path}:{lines[i] if i < len(lines) else '?'}"

        def bad(field: str, msg: str, where: str = where) -> ValueError:
            return ValueError(f"{where}: [{field}] {msg}")

        if not isinstance(row, dict):
            raise bad("row", "must be a mapping")
        for f in _REQUIRED:
            if f not in row or row[f] is None or row[f] == "":
                raise bad(f, "missing")
        date, repo = str(row["date"]), str(row["repo"])
        if row["kind"] not in KINDS:
            raise bad("kind", f"{row['kind']!r} is not one of {sorted(KINDS)}")
        if len(str(row["query"])) > MAX_QUERY:
            raise bad("query", f"longer than {MAX_QUERY} characters")
        if row["split"] != split_for(date, repo):
            raise bad("split", f"is {row['split']!r}, the rule gives {split_for(date, repo)!r}")
        for key in (str(row["id"]), str(row["url"])):
            if key in seen:
                raise bad("id/url", f"{key} appears twice")
            seen.add(key)
        # Both judgements are checked, so a stale name in `fixing` cannot hide behind `fixing_new`.
        for field in ("fixing", "fixing_new"):
            if field not in row:
                continue
            if not isinstance(row[field], list):
                raise bad(field, "must be a list of skill names")
            unknown = [s for s in row[field] if skills is not None and s not in skills]
            if unknown:
                raise bad(field, f"unknown skills {unknown}")
        if not isinstance(row.get("calibration", False), bool):
            raise bad("calibration", "must be true or false")
        if row.get("calibration") and row["split"] != "tune":
            raise bad("calibration", "only tune rows calibrate (the test half is never fitted)")
        batch = str(row.get("batch", ""))
        if "batch" in row and batch not in BATCHES:
            raise bad("batch", f"{batch!r} is not one of {sorted(BATCHES)}")
        # a batch collected after trigger writing must stay unwritten-from in the tune half too
        if batch and row["split"] == "tune" and not row.get("calibration"):
            raise bad("calibration", f"batch {batch} tune rows must set calibration: true")
        if not isinstance(row.get("literal_in_skill", False), bool):
            raise bad("literal_in_skill", "must be true or false")
        fixing = row.get("fixing_new", row["fixing"]) or []
        out.append(
            RealProblem(
                id=str(row["id"]),
                repo=repo,
                url=str(row["url"]),
                date=date,
                kind=str(row["kind"]),
                query=str(row["query"]),
                expected=tuple(str(s) for s in fixing),
                half=str(row["split"]),
                source=where,
                uncovered_at_collection=not row["fixing"],
                calibration=bool(row.get("calibration", False)),
                batch=batch,
                literal_in_skill=row.get("literal_in_skill"),
            )
        )
    return out
