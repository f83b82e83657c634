"""Claims as readers see them: each claim with the value measured on each environment and when,
rendered from the counted ledger rows (never typed into the prose). And what a Triton upgrade would
break: the CPU tiers run under more than one release (the GPU machines pin an older one than a fresh
install gets), so the same snippet's counted runs under two releases are compared: an API that
moved, a literal no longer printed, a value past a claim."""

from __future__ import annotations

from itertools import permutations
from pathlib import Path

from kbase.closed_sets import BAD_VERDICTS, TIER_SPECS
from kbase.schema import ClaimMeasurement, ClaimView


def env_name(row: dict) -> str:
    """`NVIDIA H200 (sm_90, torch 2.11, triton 3.6)` or `cpu-interpret (torch 2.13, triton 3.9)`."""
    from kbase.validators.rules import minor  # rendering only: cached views need no rules

    fp = row.get("fingerprint") or {}
    parts = []
    if row.get("tier") == "gpu" and fp.get("compute_capability"):
        parts.append("sm_" + str(fp["compute_capability"]).replace(".", ""))
    for pkg in ("torch", "triton"):
        if v := minor(fp.get(pkg)):
            parts.append(f"{pkg} {v[0]}.{v[1]}")
    who = fp.get("gpu_name") if row.get("tier") == "gpu" else row.get("tier")
    return f"{who or row.get('tier')} ({', '.join(parts)})" if parts else str(who)


def _said(m: ClaimMeasurement) -> str:
    value = str(m.raw) if m.value is None else f"{m.value:.4g}"
    if m.holds is None:  # a run outside the environments the claim's `when` names
        return f"{value} on {m.env}, {m.at} (not judged: outside the claim's environments)"
    return f"{value} on {m.env}, {m.at}" + ("" if m.holds else " (FAILS)")


def views(skill, rows: list[dict]) -> list[ClaimView]:
    """One ClaimView per claim; `rows` are the skill's counted rows (any snippet hash)."""
    from kbase.validators.claims import rejudge

    current = [r for r in rows if r.get("snippet_sha256") == skill.snippet_sha256()]
    out = []
    for c in getattr(skill.meta, "claims", []) or []:
        latest: dict[str, tuple[dict, dict]] = {}
        for r in current:
            for stored in r.get("claims") or []:
                if isinstance(stored, dict) and stored.get("id") == c.id:
                    env = env_name(r)
                    if env not in latest or r["at"] >= latest[env][0]["at"]:
                        latest[env] = (r, stored)
        measured = [
            ClaimMeasurement(
                env=env,
                value=stored.get("value"),
                raw=stored.get("raw"),
                holds=rejudge(c, stored, r.get("fingerprint")),
                at=r["at"][:10],
                signed="sig" in r,
            )
            for env, (r, stored) in sorted(latest.items())
        ]
        if c.expect:
            said = "; ".join(_said(m) for m in measured)
            rendered = f"{c.text} [expect {c.expect}; measured: {said or 'not yet'}]"
        else:
            rendered = f"{c.text} [cited: {c.cite}, {c.locator}]"
        shown = c.model_dump(include={"id", "text", "expect", "cite", "locator"})
        out.append(ClaimView(**shown, measured=measured, rendered=rendered))
    return out


def claim_views_of(root: Path, names: list[str]) -> dict[str, list[ClaimView]]:
    """The claims of skills `names`, with their measurements ([] for a skill with none).

    Kept per skill in memory and under .kbase/cache, keyed on the SKILL.md, the ledger, the
    trusted keys and the code that renders them (parsing a SKILL.md for its claims cost ~12 ms a
    skill hit of a cold search); the disk cache is written once for all those it lacked (a
    server's warm-up: rewriting it per skill was ~0.1 s a skill at 120 skills; issue #11)."""
    from kbase.validators.ledger import ledger_path
    from kbase.validators.status import _keys_sig, _stat_sig, cache_read, cache_write, code_sig

    from kbase.config import SKILL_FILE

    root = Path(root).resolve()
    state = repr((_stat_sig(ledger_path(root)), _keys_sig(root), code_sig()))
    out: dict[str, list[ClaimView]] = {}
    fresh: dict[str, dict] = {}
    disk: dict | None = None
    for name in names:
        path = root / "skills" / name / SKILL_FILE
        sig = list(_stat_sig(path))
        key = (str(root), name, state, tuple(sig))
        got = _memory.get(key)
        if got is None:
            if disk is None:
                disk = cache_read(root, _DISK_NAME)
                disk = disk if isinstance(disk, dict) else {}
            got = _cached(disk, state, name, sig)
            if got is None:
                got = _compute(root, path, name)
                if sig != [0, 0]:
                    fresh[name] = {"sig": sig, "views": [v.model_dump(mode="json") for v in got]}
            if len(_memory) > 4096:
                _memory.clear()
            _memory[key] = got
        out[name] = list(got)  # the views are shared between calls: read them, never change them
    if fresh and disk is not None:
        skills = dict(disk.get("skills", {})) if disk.get("state") == state else {}
        skills.update(fresh)
        cache_write(root, _DISK_NAME, {"state": state, "skills": skills})
    return out


def _cached(disk: dict, state: str, name: str, sig: list) -> list[ClaimView] | None:
    row = disk.get("skills", {}).get(name) if disk.get("state") == state else None
    if row is None or row.get("sig") != sig:
        return None
    try:
        return [ClaimView.model_validate(v) for v in row["views"]]
    except (ValueError, TypeError, KeyError):
        return None


def _compute(root: Path, path: Path, name: str) -> list[ClaimView]:
    from kbase.validators.status import _ledger_split, _load

    skill = _load(path, root)
    if skill is None or not getattr(skill.meta, "claims", None):
        return []
    return views(skill, _ledger_split(root)[0].get(name, []))


_memory: dict[tuple, list[ClaimView]] = {}
_DISK_NAME = "claim-views.json"


# --------------------------------------------------------------------------- releases


def _why(meta, claims, old: dict, new: dict) -> list[str]:
    """How the newer run differs for the worse: its verdict, a claim, a literal it no longer saw
    (unless the literal is declared for environments the newer run is not in)."""
    from kbase.validators.claims import literal_expected, rejudge

    why = []
    if old["verdict"] == "pass" and new["verdict"] in BAD_VERDICTS:
        why.append(f"{new['verdict']}: {new.get('message') or 'no message'}"[:200])
    stored_old = {c.get("id"): c for c in old.get("claims") or []}
    stored_new = {c.get("id"): c for c in new.get("claims") or []}
    for c in claims:
        if c.tiers and old["tier"] not in c.tiers:
            continue  # a value printed on a tier the claim does not speak for
        a, b = stored_old.get(c.id), stored_new.get(c.id)
        if a is None or b is None:
            continue
        if rejudge(c, a, old.get("fingerprint")) and rejudge(c, b, new.get("fingerprint")) is False:
            why.append(f"claim {c.id}: {a.get('value')} -> {b.get('value')} (expect {c.expect})")
    lost = set(old.get("literals_seen") or []) - set(new.get("literals_seen") or [])
    lost = {x for x in lost if literal_expected(meta, x, new.get("fingerprint"))}
    why += [f"literal no longer printed: {lit!r}" for lit in sorted(lost)]
    return why


def release_diffs(root: Path, skills: list, pkg: str = "triton") -> list[dict]:
    """{skill, tier, from, to, why} for each skill whose latest counted run with its current
    snippet differs for the worse between two `pkg` releases on a CPU tier, in either direction
    (`from` is the release it works on)."""
    from kbase.validators.rules import minor
    from kbase.validators.status import _ledger_split

    rows_by_skill = _ledger_split(root)[0]
    out = []
    for s in skills:
        sha = s.snippet_sha256()
        latest: dict[tuple[str, tuple[int, ...]], dict] = {}
        for r in rows_by_skill.get(s.name, []):
            spec = TIER_SPECS.get(r["tier"])
            rel = minor((r.get("fingerprint") or {}).get(pkg))
            if r.get("snippet_sha256") != sha or r["verdict"] == "skip" or not spec or not rel:
                continue
            if spec.sees_gpu:
                continue  # a GPU run also changes the device: not a release-only difference
            key = (r["tier"], rel)
            if key not in latest or r["at"] >= latest[key]["at"]:
                latest[key] = r
        claims = [c for c in getattr(s.meta, "claims", []) or [] if c.expect]
        for ((tier, a), ra), ((tier_b, b), rb) in permutations(sorted(latest.items()), 2):
            if tier_b == tier and (why := _why(s.meta, claims, ra, rb)):
                ends = {k: f"{pkg} {'.'.join(map(str, v))}" for k, v in (("from", a), ("to", b))}
                out.append({"skill": s.name, "tier": tier, **ends, "why": why})
    return out
