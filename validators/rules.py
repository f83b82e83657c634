"""The staleness rules: from a skill's ledger rows (and the world around it) to one status with
reasons. Pure functions over plain data, so every status can be tested with the inputs spelled
out; the severity order (worst first) is kbase.closed_sets.STATUS_ORDER."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from kbase.closed_sets import BAD_VERDICTS as BAD
from kbase.closed_sets import STATUS_ORDER as ORDER
from kbase.closed_sets import TIER_SPECS
from kbase.schema import SkillAudit


@dataclass
class SkillFacts:
    """What the rules need to know about a skill, independent of how it was loaded."""

    name: str
    tiers: list[str]
    snippet_sha256: str
    audit_date: dt.date
    max_age_days: int = 180
    claims: list = field(default_factory=list)  # kbase.schema.Claim: measured ones are judged


def _on_gpu(tier: str) -> bool:
    spec = TIER_SPECS.get(tier)
    return spec is not None and spec.sees_gpu


def minor(version: str | None) -> tuple[int, int] | None:
    m = re.match(r"^\s*(\d+)\.(\d+)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


def major(version: str | None) -> int | None:
    m = re.match(r"^\s*(\d+)", version or "")
    return int(m.group(1)) if m else None


def latest_by(rows: Iterable[dict], key: Callable[[dict], object]) -> dict:
    """The newest row (by `at`; on a tie the later in file order) for each key(row) not None."""
    out: dict = {}
    for r in rows:
        k = key(r)
        if k is not None and (k not in out or r["at"] >= out[k]["at"]):
            out[k] = r
    return out


def env_label(tier: str, fp: dict) -> str:
    """A short name for the environment a run happened in; also the column of the HTML matrix."""
    parts = [tier]
    if _on_gpu(tier):
        gpu = fp.get("gpu_name") or "GPU"
        cc = fp.get("compute_capability")
        parts.append(f"{gpu} (cc {cc})" if cc else gpu)
    for pkg in ("triton", "torch"):
        if fp.get(pkg):
            parts.append(f"{pkg} {'.'.join(map(str, minor(fp[pkg]) or ()))}")
    return " · ".join(parts)


def _cuda(fp: dict) -> str | None:
    return fp.get("torch_cuda") or fp.get("nvcc")


def env_gap(row: dict, env: dict, gpu_declared: bool) -> list[str]:
    """Why a pass does not speak for `env` (empty when it does): older versions or another arch."""
    fp = row.get("fingerprint") or {}
    want_cc = env.get("compute_capability")
    if _on_gpu(row["tier"]) and not want_cc:
        return []  # an environment without a GPU cannot re-run a GPU pass, so cannot outdate it
    gaps = []
    for pkg in ("triton", "torch"):
        have, want = minor(fp.get(pkg)), minor(env.get(pkg))
        if have and want and have < want:
            gaps.append(f"{pkg} {fp[pkg]} < {env[pkg]}")
    spec = TIER_SPECS.get(row["tier"])
    if spec is None or not spec.python_only:  # the interpreter never touches CUDA
        have_c, want_c = major(_cuda(fp)), major(_cuda(env))
        if have_c and want_c and have_c < want_c:
            gaps.append(f"CUDA {_cuda(fp)} < {_cuda(env)}")
    if want_cc and gpu_declared:
        if not _on_gpu(row["tier"]):
            gaps.append(f"not run on a GPU (asked about cc {want_cc})")
        elif fp.get("compute_capability") != want_cc:
            gaps.append(f"ran on cc {fp.get('compute_capability')}, asked about cc {want_cc}")
    return gaps


def _gpus_not_rechecked(rows: list[dict], current: list[dict]) -> list[str]:
    """A GPU on which an earlier snippet passed but the current one has no run: named, so a
    reader sees which GPU the status no longer speaks for (it does not change the status)."""

    def gpu(r: dict) -> str | None:
        return (r.get("fingerprint") or {}).get("gpu_name") if _on_gpu(r["tier"]) else None

    now_on = {gpu(r) for r in current}
    last_pass: dict[str, str] = {}
    for r in rows:
        name = gpu(r)
        if name and r["verdict"] == "pass" and name not in now_on:
            last_pass[name] = max(last_pass.get(name, ""), r["at"][:10])
    return [f"not re-checked on {g} since {d}" for g, d in sorted(last_pass.items())]


def judge(
    facts: SkillFacts,
    rows: list[dict],
    *,
    now: dt.datetime,
    env: dict | None = None,
    source_touched: str | None = None,
    self_reported: list[dict] | None = None,
) -> SkillAudit:
    """The status of one skill. `rows`: its ledger rows that may count (sandboxed, signed by a
    trusted key when keys are configured) in file order, any snippet hash; `self_reported`: the
    others, whose passes never verify, but make a skill with no other pass `self-reported`, not
    `unverified`, so a reader sees that it was run but nobody vouches for the run."""
    others = self_reported or []
    today = now.date()
    current = [r for r in rows if r.get("snippet_sha256") == facts.snippet_sha256]
    older = len(rows) - len(current)
    found: dict[str, list[str]] = {s: [] for s in ORDER}

    latest = latest_by(
        (r for r in current if r["verdict"] != "skip"),
        lambda r: (r["tier"], env_label(r["tier"], r.get("fingerprint") or {})),
    )
    for (_tier, label), r in sorted(latest.items()):
        if r["verdict"] in BAD:
            where = f" at SKILL.md line {r['line']}" if r.get("line") else ""
            msg = f": {r['message']}" if r.get("message") else ""
            ran = f"latest run on {label} was {r['verdict']} ({r['at'][:10]})"
            found["failing"].append(ran + where + msg)

    claim_counts = _judge_claims(facts, current, latest, found)
    passes = [r for r in current if r["verdict"] == "pass" and r["tier"] in facts.tiers]
    mine = [r for r in others if r.get("snippet_sha256") == facts.snippet_sha256]
    claimed = {r["tier"] for r in mine if r["verdict"] == "pass" and r["tier"] in facts.tiers}
    last = None
    if passes:
        last = _judge_passes(facts, passes, others, claimed, env, source_touched, today, found)
    elif claimed:
        found["self-reported"].append(_self_reported_why(others, claimed))
    else:
        why = "never passed on any tier it declares"
        if older:
            why += f" with this snippet ({older} run(s) of an earlier snippet no longer count)"
        if others:
            why += f" in a sandboxed run signed by a trusted key ({len(others)} self-reported"
            why += " run(s) do not count)"
        found["unverified"].append(why)
    audit_age = (today - facts.audit_date).days
    if audit_age > facts.max_age_days:
        old = f"human audit of {facts.audit_date.isoformat()} is {audit_age} days old "
        found["stale-age"].append(old + f"(max_age_days {facts.max_age_days})")

    status = next((s for s in ORDER[:-1] if found[s]), "verified")
    reasons = [r for s in ORDER[:-1] for r in found[s]] + _gpus_not_rechecked(rows, current)
    on = env_label(last["tier"], last.get("fingerprint") or {}) if last else None
    if status == "verified" and on is not None:
        reasons.append(f"passed on {on}")
    last_pass = last["at"] if last else None
    audit = {"skill": facts.name, "status": status, "last_pass": last_pass, "verified_on": on}
    return SkillAudit.model_validate({**audit, "reasons": reasons, "claims": claim_counts})


def _judge_passes(
    facts: SkillFacts,
    passes: list[dict],
    others: list[dict],
    claimed: set[str],
    env: dict | None,
    source_touched: str | None,
    today: dt.date,
    found: dict[str, list[str]],
) -> dict:
    """What the passes say (stale source, environment or age; tiers never passed); the newest."""
    last = max(passes, key=lambda r: r["at"])
    last_day = dt.date.fromisoformat(last["at"][:10])
    if source_touched and source_touched[:10] > last_day.isoformat():
        changed = f"a watched upstream path changed on {source_touched[:10]}, "
        found["stale-source"].append(changed + f"after the last pass ({last_day.isoformat()})")
    if env:
        gpu_declared = any(_on_gpu(t) for t in facts.tiers)
        if all(env_gap(r, env, gpu_declared) for r in passes):
            gap = "; ".join(env_gap(last, env, gpu_declared))
            found["stale-env"].append(f"no pass on the environment asked about: {gap}")
    # verified means every claim was measured: each declared tier needs its own pass
    missing = [t for t in facts.tiers if not any(r["tier"] == t for r in passes)]
    if missing and set(missing) <= claimed:
        found["self-reported"].append(_self_reported_why(others, set(missing)))
    elif missing:
        passed = ", ".join(sorted({r["tier"] for r in passes}))
        why = f"no pass with this snippet on tier(s) {', '.join(missing)}"
        found["unverified"].append(f"{why} (passed on {passed})")
    age = (today - last_day).days
    if age > facts.max_age_days:
        why = f"last pass was {age} days ago (max_age_days {facts.max_age_days})"
        found["stale-age"].append(why)
    return last


def _self_reported_why(others: list[dict], tiers: set[str]) -> str:
    unsigned = sum(1 for r in others if r["verdict"] == "pass" and r["tier"] in tiers)
    return (
        f"passed on tier(s) {', '.join(sorted(tiers))} only in {unsigned} run(s) that do not count"
        " (not signed by a trusted runner, or run outside the sandbox)"
    )


def _judge_claims(
    facts: SkillFacts, current: list[dict], latest: dict[tuple, dict], found: dict
) -> dict:
    """Re-judge stored measurements against the claims as written now: a claim that fails in the
    latest run on an environment makes the skill failing (for that environment); a measured claim
    that no passing run measured holding keeps it unverified."""
    from kbase.validators.claims import env_matches, rejudge

    measured = [c for c in facts.claims if getattr(c, "expect", None)]
    cited = sum(1 for c in facts.claims if getattr(c, "cite", None))

    def judged(rows):  # (claim, row, stored, rejudged) where a row reported a claim for its tier
        for r in rows:
            stored = {c.get("id"): c for c in r.get("claims") or [] if isinstance(c, dict)}
            for c in measured:
                if r["tier"] in (c.tiers or facts.tiers) and c.id in stored:
                    yield c, r, stored[c.id], rejudge(c, stored[c.id], r.get("fingerprint"))

    failed: set[str] = set()
    for c, r, got, holds in judged(r for _, r in sorted(latest.items())):
        if holds is False:
            failed.add(c.id)
            if r["verdict"] == "pass":  # a failed run already says why
                value = got.get("value", got.get("raw"))
                label = env_label(r["tier"], r.get("fingerprint") or {})
                why = f"claim {c.id}: measured {value} on {label} ({r['at'][:10]}), "
                found["failing"].append(why + f"expected {c.expect}")
    passes = [r for r in current if r["verdict"] == "pass"]
    held = {c.id for c, _, _, holds in judged(passes) if holds} - failed
    # A claim declared for environments no counted run was on (`when`: an AMX host, a GPU model
    # not lent yet) has nothing to be judged by: it is listed, not held against the skill.
    ran = [(r["tier"], r.get("fingerprint")) for r in passes]

    def judgeable(c) -> bool:
        return getattr(c, "when", None) is None or any(
            t in (c.tiers or facts.tiers) and env_matches(c, fp) for t, fp in ran
        )

    unmeasured = [c.id for c in measured if c.id not in held | failed and judgeable(c)]
    if unmeasured:
        why = "claim(s) never measured holding in a counted run: "
        found["unverified"].append(why + ", ".join(unmeasured))
    return {"held": len(held), "failed": len(failed), "unmeasured": len(unmeasured), "cited": cited}
