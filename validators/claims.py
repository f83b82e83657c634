"""Claims: the relation grammar, and the judgement of what a run measured against what a skill says.

A measured claim carries `expect`, a relation: ">= x", "<= x", "> x", "< x", "== x" or
"in [a, b]" (inclusive). A snippet reports a value by printing `KBASE_MEASURE <id> <number>` on
stdout. A NaN or infinite value never holds (inf would satisfy ">= x", -inf "<= x"). Values are
stored in ledger rows, so a status can re-judge them against the claim as it reads today.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from kbase.errors import InvalidArgument

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_REL = re.compile(rf"^\s*(>=|<=|==|>|<)\s*({_NUM})\s*$")
_IN = re.compile(rf"^\s*in\s*\[\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*$")
RELATION_HELP = 'a relation: ">= x", "<= x", "> x", "< x", "== x" or "in [a, b]"'


class RelationError(InvalidArgument):
    """An `expect` that is not one of the relations claims may use."""


@dataclass(frozen=True)
class Relation:
    op: str  # >=, <=, >, <, ==, in
    a: float
    b: float | None = None

    def holds(self, value: float | None) -> bool:
        if value is None or not math.isfinite(value):
            return False
        if self.op == ">=":
            return value >= self.a
        if self.op == "<=":
            return value <= self.a
        if self.op == ">":
            return value > self.a
        if self.op == "<":
            return value < self.a
        if self.op == "==":
            return value == self.a
        assert self.b is not None
        return self.a <= value <= self.b

    def __str__(self) -> str:
        if self.op == "in":
            return f"in [{self.a:g}, {self.b:g}]"
        return f"{self.op} {self.a:g}"


def parse_relation(text: str) -> Relation:
    m = _REL.match(text or "")
    if m:
        return Relation(m.group(1), float(m.group(2)))
    m = _IN.match(text or "")
    if m:
        a, b = float(m.group(1)), float(m.group(2))
        if a > b:
            raise RelationError(f"{text!r}: the interval [a, b] needs a <= b")
        return Relation("in", a, b)
    raise RelationError(f"{text!r} is not {RELATION_HELP}")


def parse_value(raw: str) -> float | None:
    """A reported number; None when it is not one. 'nan' and 'inf' parse (and never hold)."""
    try:
        return float(raw)
    except (TypeError, ValueError):
        return None


def json_value(v: float | None) -> float | None:
    """Ledger rows are strict JSON: a NaN or infinite measurement is stored as null plus `raw`."""
    return v if v is not None and math.isfinite(v) else None


def applies(claim, tier: str, declared: list[str]) -> bool:
    if claim.expect is None:
        return False
    return tier in (claim.tiers or declared)


@dataclass
class ClaimVerdict:
    """Measured claims judged for one run on one tier."""

    results: list[dict]  # {"id", "value", "expect", "holds"} (+ "raw" when not finite)
    failed: list[str]  # messages: claim, value, relation
    missing: list[str]  # ids applicable to the tier that the run did not report
    unknown: list[str]  # ids reported that the skill does not declare

    def message(self) -> str:
        if self.unknown:
            ids = ", ".join(sorted(set(self.unknown)))
            return f"KBASE_MEASURE for unknown claim id(s): {ids} (declare them under claims:)"
        if self.failed:
            return "; ".join(self.failed)
        if self.missing:
            return "measured claim(s) not reported on this tier: " + ", ".join(self.missing)
        return ""


def judge_measures(
    claims: list, tier: str, declared: list[str], measures: list[tuple[str, str]]
) -> ClaimVerdict:
    by_id = {c.id: c for c in claims}
    reported: dict[str, list[str]] = {}
    unknown: list[str] = []
    for cid, raw in measures:
        if cid in by_id and by_id[cid].expect is not None:
            reported.setdefault(cid, []).append(raw)
        else:
            unknown.append(cid)
    results, failed, missing = [], [], []
    for c in claims:
        if c.expect is None:
            continue
        rel = parse_relation(c.expect)
        on_tier = applies(c, tier, declared)
        raws = reported.get(c.id)
        if not raws:
            if on_tier:
                missing.append(c.id)
            continue
        values = [parse_value(r) for r in raws]
        last = values[-1]
        row: dict = {"id": c.id, "value": json_value(last), "expect": c.expect}
        if last is None or not math.isfinite(last):
            row["raw"] = raws[-1]
        if on_tier:
            bad = [(r, v) for r, v in zip(raws, values, strict=True) if not rel.holds(v)]
            row["holds"] = not bad
            if bad:
                r, _ = bad[0]
                failed.append(f"claim {c.id}: measured {r}, expected {rel}")
        else:
            row["holds"] = None  # reported on a tier the claim does not speak for
        results.append(row)
    return ClaimVerdict(results, failed, missing, unknown)


def rejudge(claim, stored: dict) -> bool | None:
    """Judge a stored measurement against the claim as it reads now (None: nothing to judge)."""
    if claim.expect is None:
        return None
    value = stored.get("value")
    if value is None and stored.get("raw") is not None:
        value = parse_value(stored["raw"])
    try:
        return parse_relation(claim.expect).holds(None if value is None else float(value))
    except (RelationError, TypeError, ValueError):
        return False
