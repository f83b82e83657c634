"""Claims as readers see them: each claim with the value measured on each environment and when,
rendered from the counted ledger rows (never typed into the prose)."""

from __future__ import annotations

from pathlib import Path

from kbase.validators.rules import minor

from kbase.schema import ClaimMeasurement, ClaimView


def env_name(row: dict) -> str:
    """`NVIDIA H200 (sm_90, torch 2.11, triton 3.6)` or `cpu-interpret (torch 2.13, triton 3.9)`."""
    fp = row.get("fingerprint") or {}
    parts = []
    if row.get("tier") == "gpu" and fp.get("compute_capability"):
        parts.append("sm_" + str(fp["compute_capability"]).replace(".", ""))
    for pkg in ("torch", "triton"):
        v = minor(fp.get(pkg))
        if v:
            parts.append(f"{pkg} {v[0]}.{v[1]}")
    who = fp.get("gpu_name") if row.get("tier") == "gpu" else row.get("tier")
    return f"{who or row.get('tier')} ({', '.join(parts)})" if parts else str(who)


def _fmt(v: float | None, raw: str | None) -> str:
    if v is None:
        return str(raw)
    return f"{v:.4g}"


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
                holds=rejudge(c, stored),
                at=r["at"][:10],
                signed="sig" in r,
            )
            for env, (r, stored) in sorted(latest.items())
        ]
        if c.expect:
            said = "; ".join(
                f"{_fmt(m.value, m.raw)} on {m.env}, {m.at}" + ("" if m.holds else " (FAILS)")
                for m in measured
            )
            rendered = f"{c.text} [expect {c.expect}; measured: {said or 'not yet'}]"
        else:
            rendered = f"{c.text} [cited: {c.cite}, {c.locator}]"
        out.append(
            ClaimView(
                id=c.id,
                text=c.text,
                expect=c.expect,
                cite=c.cite,
                locator=c.locator,
                measured=measured,
                rendered=rendered,
            )
        )
    return out


def claim_views(root: Path, name: str) -> list[ClaimView]:
    """The claims of skill `name` under `root`, with their measurements; [] if it has none."""
    from kbase.ingest.skills import SKILL_FILE
    from kbase.validators.status import _load, _rows_by_skill

    root = Path(root).resolve()
    skill = _load(root / "skills" / name / SKILL_FILE, root)
    if skill is None or not getattr(skill.meta, "claims", None):
        return []
    return views(skill, _rows_by_skill(root).get(name, []))
