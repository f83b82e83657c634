"""Per-skill status for the rest of kbase: `skill_statuses(root)` is called on every search query.
It stays fast by caching on what it reads: the ledger (by mtime and size), each SKILL.md (by
mtime and size) and the PR archive's folders; a warm call costs a few stat() calls."""

from __future__ import annotations

import datetime as dt
import functools
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from kbase.validators.ledger import ledger_path, read_ledger

if TYPE_CHECKING:  # the rules judge skills only when no cached status answers (a cold search)
    from kbase.validators.rules import SkillFacts

    from kbase.schema import SkillAudit

_lock = threading.Lock()
_results: dict[tuple, dict] = {}
_ledgers: dict[str, tuple] = {}


def _log():  # imported when there is something to say: logging was ~10 ms of a cold search
    import logging

    return logging.getLogger(__name__)


def _stat_sig(path: Path | str) -> tuple:
    try:
        st = os.stat(path)
        return (st.st_mtime_ns, st.st_size)
    except OSError:
        return (0, 0)


def _env_dict(env) -> dict | None:
    if not env:
        return None
    if env == "local":
        from kbase.validators.fingerprint import fingerprint

        return fingerprint("gpu")  # this machine, GPU included when there is one
    return env.model_dump() if hasattr(env, "model_dump") else dict(env)


def _load(path: Path, root: Path):
    """The skill, or None when it does not parse (load_skill keeps parsed texts per process)."""
    from kbase.ingest.markdown import DocumentError
    from kbase.ingest.skills import load_skill

    try:
        return load_skill(path, root)
    except (DocumentError, OSError) as exc:
        _log().debug("skipping %s: %s", path, exc)
        return None


def _skill_sigs(root: Path) -> tuple:
    """((path, _stat_sig), ...) of the files find_skill_files lists, in its order, with one
    stat() each: through pathlib this key cost ~7 ms of every search that returned a skill."""
    from kbase.config import SKILL_FILE

    base = os.path.join(str(root), "skills")
    try:
        with os.scandir(base) as it:
            names = sorted(d.name for d in it if d.is_dir())
    except OSError:
        return ()
    files = (os.path.join(base, name, SKILL_FILE) for name in names)
    return tuple((f, sig) for f in files if (sig := _stat_sig(f)) != (0, 0))


def _keys_sig(root: Path) -> tuple:
    folder = root / "ledger" / "trusted-keys"  # glob() finds nothing where the folder is missing
    return tuple((p.name, _stat_sig(p)) for p in sorted(folder.glob("*.pub")))


def _ledger_split(root: Path) -> tuple[dict[str, list[dict]], dict[str, list[dict]]]:
    """(rows that may count: sandboxed, trusted when keys are configured; the others), by skill."""
    from kbase.validators.signing import counts, trusted_keys

    path = ledger_path(root)
    sig = (_stat_sig(path), _keys_sig(root))
    cached = _ledgers.get(str(path))
    if cached and cached[0] == sig:
        return cached[1]
    read = read_ledger(root, strict=False)
    for p in read.problems:
        _log().warning("ignoring ledger line: %s", p)
    keys = trusted_keys(root)
    grouped: dict[str, list[dict]] = {}
    others: dict[str, list[dict]] = {}
    for row in read.rows:
        (grouped if counts(row, keys) else others).setdefault(row["skill"], []).append(row)
    _ledgers[str(path)] = (sig, (grouped, others))
    return grouped, others


def source_touched(root: Path, skill) -> str | None:
    """ISO date of the newest archived PR touching a watched path; None: no watch or archive."""
    if not skill.meta.watch:
        return None
    from kbase.ingest.card_history import latest_touch

    touched = []
    for w in skill.meta.watch:
        try:
            touched.append(latest_touch(root, w.repo, list(w.paths)))
        except Exception as exc:  # another area's bug must not take search down with it
            _log().warning("latest_touch(%s) failed: %s", w.repo, exc)
    return max((str(t) for t in touched if t), default=None)


def facts_of(skill) -> SkillFacts:
    from kbase.validators.rules import SkillFacts

    m, sha = skill.meta, skill.snippet_sha256()
    tiers, claims = list(m.verification.tiers), list(getattr(m, "claims", []) or [])
    return SkillFacts(m.name, tiers, sha, m.audit.date, m.audit.max_age_days, claims)


def judgements(
    root: Path, *, now: dt.datetime | None = None, env=None, skills: list | None = None
) -> dict[str, SkillAudit]:
    """Status of every loadable skill (or of `skills`), uncached; `env=None` skips the env rule."""
    from kbase.ingest.skills import find_skill_files
    from kbase.validators.rules import judge

    root = Path(root).resolve()
    now = now or dt.datetime.now(dt.UTC)
    env_d = _env_dict(env)
    rows, self_reported = _ledger_split(root)
    if skills is None:
        skills = [s for s in (_load(p, root) for p in find_skill_files(root)) if s is not None]
    return {
        s.name: judge(
            facts_of(s),
            rows.get(s.name, []),
            now=now,
            env=env_d,
            source_touched=source_touched(root, s),
            self_reported=self_reported.get(s.name, []),
        )
        for s in skills
    }


def skill_statuses(
    root: Path, *, now: dt.datetime | None = None, env: None | str | dict | object = None
) -> dict:
    """skill name -> kbase.schema.SkillAudit, cached until the ledger, a skill or the archive
    changes. env: the environment asked about (a fingerprint dict with triton/torch/torch_cuda/
    compute_capability), "local" for this machine, or None to ask about none: then stale-env is
    never reported, since whoever searches is rarely on the machine that will run the kernel."""
    root = Path(root).resolve()
    now = now or dt.datetime.now(dt.UTC)
    env_d = _env_dict(env)
    asked = sorted((k, str(v)) for k, v in (env_d or {}).items() if k not in ("date", "git_commit"))
    base = root / "pr_archive"
    archive = [base, *(p for p in sorted(base.iterdir()) if p.is_dir())] if base.is_dir() else []
    sigs = (_stat_sig(ledger_path(root)), _keys_sig(root), _skill_sigs(root))
    key = (str(root), *sigs, tuple(map(_stat_sig, archive)), now.date().isoformat(), tuple(asked))
    with _lock:
        hit = _results.get(key)
        if hit is not None:
            return hit
        import hashlib

        digest = hashlib.sha256(repr((key, code_sig(), __file__)).encode()).hexdigest()
        out = _read_disk(root, digest)
        if out is None:
            out = judgements(root, now=now, env=env_d)
            statuses = {n: a.model_dump(mode="json") for n, a in out.items()}
            cache_write(root, _DISK_NAME, {"key": digest, "statuses": statuses})
        _results.clear()  # only the newest state matters; keeps memory flat in a long-lived server
        _results[key] = out
        return out


# A cold `kbase search` would otherwise parse every SKILL.md to judge it (a third of a second at
# 100 skills). The statuses of the last state are kept on disk under the same key as in memory,
# plus the code that judges them, so an edit, a new ledger row, a new day or an upgrade misses.
_DISK_NAME = "skill-statuses.json"


@functools.cache
def code_sig() -> tuple:
    """Changes with the code that parses skills, judges them and renders their claims (fixed per
    process): part of the key of both caches. The modules are found, not imported: a cached
    answer needs neither the markdown parser nor the rules."""
    from kbase.retrieval.collect import module_files

    mods = [f"kbase.validators.{m}" for m in ("status", "claim_views", "claims", "rules")]
    mods += ["kbase.schema"] + [f"kbase.ingest.{m}" for m in ("skills", "markdown")]
    return tuple(_stat_sig(Path(f)) for m in mods for f in module_files(m) or [""])


def _read_disk(root: Path, digest: str) -> dict | None:
    from kbase.schema import SkillAudit

    data = cache_read(root, _DISK_NAME)
    try:
        if data.get("key") != digest:
            return None
        return {n: SkillAudit.model_validate(v) for n, v in data["statuses"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


def cache_read(root: Path, name: str):
    """What .kbase/cache/`name` holds (JSON), or None when it is missing or not JSON."""
    import json

    try:
        return json.loads((root / ".kbase" / "cache" / name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def cache_write(root: Path, name: str, data: object) -> None:
    """Replace .kbase/cache/`name` atomically: concurrent writers lose each other's entries at
    worst (a later miss)."""
    import json
    import tempfile

    folder = root / ".kbase" / "cache"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}-", dir=folder)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(data, fh)
        os.replace(tmp, folder / name)
    except OSError as exc:  # a read-only root still answers, only slower
        _log().debug("%s not written: %s", name, exc)
