"""Claims: the relation grammar, and the judgement of what a run measured against what a skill says
(CONTRIBUTING.md, "Claims"). NaN and inf never hold (inf would satisfy ">= x"). Values are stored
in ledger rows, so a status can re-judge them against the claim as it reads today."""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass

from kbase.errors import InvalidArgument

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_REL = re.compile(rf"^\s*(>=|<=|==|>|<)\s*({_NUM})\s*$")
_IN = re.compile(rf"^\s*in\s*\[\s*({_NUM})\s*,\s*({_NUM})\s*\]\s*$")
_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "==": operator.eq}
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
        if self.op == "in":
            assert self.b is not None
            return self.a <= value <= self.b
        return _OPS[self.op](value, self.a)

    def __str__(self) -> str:
        return f"in [{self.a:g}, {self.b:g}]" if self.op == "in" else f"{self.op} {self.a:g}"


def parse_relation(text: str) -> Relation:
    if m := _REL.match(text or ""):
        return Relation(m.group(1), float(m.group(2)))
    if m := _IN.match(text or ""):
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


def _version_in(version: str | None, spec: str) -> bool | None:
    if not version:
        return None
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    try:  # "2.13.0+cpu" is 2.13.0 for a range: the local part names the build, not the release
        return Version(Version(version).base_version) in SpecifierSet(spec, prereleases=True)
    except InvalidVersion:
        return None


def env_matches(claim, fp: dict | None) -> bool | None:
    """Whether a run's environment (its fingerprint) is one the claim's `when` speaks for.
    True with no `when`; None when the fingerprint lacks what `when` asks about (an old row)."""
    when = getattr(claim, "when", None)
    if when is None:
        return True
    fp = fp or {}
    checks: list[bool | None] = []
    if when.gpu is not None:
        name = (fp.get("gpu_name") or "").lower()
        checks.append(any(g.lower() in name for g in when.gpu) if name else None)
    if when.arch is not None:
        cc = str(fp.get("compute_capability") or "").replace(".", "")
        checks.append(any(a.rstrip("af") == f"sm{cc}" for a in when.arch) if cc else None)
    for pkg in ("triton", "torch", "numpy"):
        spec = getattr(when, pkg)
        if spec is not None:
            checks.append(_version_in(fp.get(pkg), spec))
    if when.cpu_flags is not None:
        have = fp.get("cpu_flags")
        ok = have is not None and all(
            (f[1:] not in have) if f[0] == "!" else (f in have) for f in when.cpu_flags
        )
        checks.append(None if have is None else ok)
    if any(c is False for c in checks):
        return False
    return None if any(c is None for c in checks) else True


def literal_expected(meta, literal: str, fp: dict | None) -> bool:
    """Whether a run in environment `fp` must print the literal trigger: always, unless the
    trigger declares `when` and the run is not (known to be) in those environments."""
    declared = (getattr(meta, "literal_when", None) or {}).get(literal)
    return declared is None or env_matches(declared, fp) is True


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
    claims: list, tier: str, declared: list[str], measures: list[tuple[str, str]], fp: dict | None
) -> ClaimVerdict:
    measured = [c for c in claims if c.expect is not None]
    unknown = [cid for cid, _ in measures if cid not in {c.id for c in measured}]
    results, failed, missing = [], [], []
    for c in measured:
        rel = parse_relation(c.expect)
        # whether a run on `tier` in environment `fp` must report and satisfy the claim
        on_tier = tier in (c.tiers or declared) and env_matches(c, fp) is True
        raws = [raw for cid, raw in measures if cid == c.id]
        if not raws:
            if on_tier:
                missing.append(c.id)
            continue
        values = [parse_value(r) for r in raws]
        finite = values[-1] is not None and math.isfinite(values[-1])
        row: dict = {"id": c.id, "value": values[-1] if finite else None, "expect": c.expect}
        if not finite:  # ledger rows are strict JSON: NaN or inf is stored as null plus `raw`
            row["raw"] = raws[-1]
        if on_tier:
            bad = [r for r, v in zip(raws, values, strict=True) if not rel.holds(v)]
            row["holds"] = not bad
            if bad:
                failed.append(f"claim {c.id}: measured {bad[0]}, expected {rel}")
        else:
            row["holds"] = None  # reported on a tier the claim does not speak for
        results.append(row)
    return ClaimVerdict(results, failed, missing, unknown)


def rejudge(claim, stored: dict, fp: dict | None = None) -> bool | None:
    """Judge a stored measurement against the claim as it reads now (None: nothing to judge, or
    a run in an environment the claim's `when` does not speak for)."""
    if claim.expect is None or env_matches(claim, fp) is not True:
        return None
    value = stored.get("value")
    if value is None and stored.get("raw") is not None:
        value = parse_value(stored["raw"])
    try:
        return parse_relation(claim.expect).holds(None if value is None else float(value))
    except (RelationError, TypeError, ValueError):
        return False


def host_dependent_claims(skill) -> list[tuple[str, str]]:
    """(claim id, why) for each CPU-tier measured claim whose outcome the host's CPU decides: a
    snippet that calls a torch operator whose CPU kernel is chosen by host features
    (closed_sets.HOST_DISPATCHED_OPS) measures the host unless it pins the reference path
    (HOST_DISPATCH_PINS) or the claim names the hosts it holds on (`when: {cpu_flags: ...}`):
    the fp8 `_scaled_mm` checks passed on AMD hosts and failed on AMX Xeons that way."""
    from kbase.closed_sets import HOST_DISPATCH_PINS, HOST_DISPATCHED_OPS, TIER_SPECS

    code = "\n".join(b.code for b in skill.snippet_blocks() if b.lang == "python")
    ops = sorted(_cpu_reachable_calls(code) & set(HOST_DISPATCHED_OPS))
    if not ops or any(pin in code for pin in HOST_DISPATCH_PINS):
        return []
    declared = list(skill.meta.verification.tiers)
    cpu_tiers = [t for t in declared if not TIER_SPECS[t].sees_gpu]
    out = []
    for c in getattr(skill.meta, "claims", []) or []:
        if c.expect is None or (c.when is not None and c.when.cpu_flags is not None):
            continue
        if any(t in (c.tiers or declared) for t in cpu_tiers):
            why = "; ".join(f"{op}: {HOST_DISPATCHED_OPS[op]}" for op in ops)
            out.append((c.id, why))
    return out


def _cpu_reachable_calls(code: str) -> set[str]:
    """Names of the attributes called (`torch.x(...)`) outside an `if` whose test names CUDA or
    the GPU tier: calls only a GPU run reaches do not measure the host's CPU."""
    import ast

    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and re.search(r"cuda|\bgpu\b", ast.unparse(node.test), re.I):
            test = node.test  # `if not cuda...` / `if TIER != "gpu"`: the body is the CPU path
            negated = (isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)) or (
                isinstance(test, ast.Compare) and isinstance(test.ops[0], ast.NotEq)
            )
            branch: list[ast.stmt] = node.body if negated else node.orelse
            for stmt in branch:
                visit(stmt)
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            found.add(node.func.attr)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found
