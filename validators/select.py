"""Resolve command-line skill names or paths to loaded skills, keeping their load problems."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from kbase.errors import NotFound


class UnknownSkill(NotFound):
    """A name or path on the command line that is no skill: bad usage (exit 2)."""

    exit_code = 2


def skill_file(root: Path, ref: str) -> Path:
    """A name (`triton-masked-tail`), a folder or a SKILL.md path -> the SKILL.md path."""
    p = Path(ref)
    for cand in (p, root / p):
        if cand.is_dir() and (cand / "SKILL.md").exists():
            return cand / "SKILL.md"
        if cand.is_file() and cand.name == "SKILL.md":
            return cand
    named = root / "skills" / ref / "SKILL.md"
    if named.exists():
        return named
    raise UnknownSkill(
        f"no skill {ref!r}: neither a path to a SKILL.md nor skills/{ref}/SKILL.md under {root}"
    )


def load_skills(root: Path, refs: Iterable[str] | None):
    """(skills, load problems). Unknown names raise UnknownSkill."""
    from kbase.ingest.markdown import DocumentError
    from kbase.ingest.skills import find_skill_files, load_skill

    refs = list(refs or [])
    files = [skill_file(root, r) for r in refs] if refs else find_skill_files(root)
    skills, problems, seen = [], [], set()
    for f in files:
        key = f.resolve()
        if key in seen:
            continue
        seen.add(key)
        try:
            skills.append(load_skill(f, root))
        except DocumentError as exc:
            problems.extend(exc.problems)
    return skills, problems
