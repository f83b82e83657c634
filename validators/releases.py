"""What a Triton (or torch) upgrade would break: the same snippet's counted CPU-tier runs under two
releases, compared.

The CPU tiers run under more than one Triton release (the GPU machines pin an older one than a
fresh install gets), so a skill can pass on one and fail on the other: an API that moved, an error
text that changed (a literal trigger), a value that shifted past a claim. The audit lists each
such skill with the two releases and why, from the ledger alone.
"""

from __future__ import annotations

from pathlib import Path

from kbase.closed_sets import BAD_VERDICTS, TIER_SPECS


def _minor(row: dict, pkg: str) -> tuple[int, ...] | None:
    from kbase.validators.rules import minor

    return minor((row.get("fingerprint") or {}).get(pkg))


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
    from kbase.validators.status import _rows_by_skill

    rows_by_skill = _rows_by_skill(root)
    out = []
    for s in skills:
        sha = s.snippet_sha256()
        latest: dict[tuple[str, tuple[int, ...]], dict] = {}
        for r in rows_by_skill.get(s.name, []):
            spec = TIER_SPECS.get(r["tier"])
            rel = _minor(r, pkg)
            if r.get("snippet_sha256") != sha or r["verdict"] == "skip" or not spec or not rel:
                continue
            if spec.sees_gpu:
                continue  # a GPU run also changes the device: not a release-only difference
            key = (r["tier"], rel)
            if key not in latest or r["at"] >= latest[key]["at"]:
                latest[key] = r
        claims = [c for c in getattr(s.meta, "claims", []) or [] if c.expect]
        for (tier, a), ra in sorted(latest.items()):
            for (tier_b, b), rb in sorted(latest.items()):
                if tier_b != tier or a == b:
                    continue
                why = _why(s.meta, claims, ra, rb)
                if why:
                    out.append(
                        {
                            "skill": s.name,
                            "tier": tier,
                            "from": f"{pkg} {'.'.join(map(str, a))}",
                            "to": f"{pkg} {'.'.join(map(str, b))}",
                            "why": why,
                        }
                    )
    return out
