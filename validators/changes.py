"""Which skills a branch changed: committed since the merge base, staged, unstaged and untracked."""

from __future__ import annotations

import functools
from pathlib import Path

from kbase.errors import KbaseError
from kbase.schema import Problem

DEFAULT_BASES = ("origin/main", "main", "origin/master", "master")


class ChangesError(KbaseError, RuntimeError):
    pass


def _repo(root: Path):
    try:
        import git  # gitpython: only `kbase check --changed` needs it
    except ImportError as exc:
        raise ChangesError("kbase check --changed needs gitpython (pip install gitpython)") from exc
    try:
        return git.Repo(root, search_parent_directories=True), git
    except (git.InvalidGitRepositoryError, git.NoSuchPathError):
        raise ChangesError(f"{root} is not inside a git repository") from None


def _merge_base(root: Path, base: str | None):
    """(repo, git module, merge-base revision, the base name used)."""
    repo, git = _repo(root)
    for chosen in [base] if base else DEFAULT_BASES:
        try:
            repo.commit(chosen)
            break
        except (git.BadName, ValueError, git.GitCommandError):
            continue
    else:
        if base:
            raise ChangesError(f"--base {base!r} is not a revision in this repository")
        # comparing against HEAD would take whatever the branch committed (a key of its own and
        # the rows it signs) for the base: without a base there is nothing to judge against
        raise ChangesError(
            f"no base to compare with: none of {', '.join(DEFAULT_BASES)} exists here; "
            "fetch the target branch or pass --base REF"
        )
    try:
        merge_base = repo.merge_base(chosen, "HEAD")
    except git.GitCommandError as exc:
        raise ChangesError(f"git merge-base {chosen} failed: {exc.stderr.strip() or exc}") from None
    return repo, git, (merge_base[0].hexsha if merge_base else chosen), chosen


def changed_skills(root: Path, base: str | None = None) -> tuple[list[str], str]:
    """Names of skill folders with a file changed against the merge base (committed, staged,
    unstaged or untracked) that still have a SKILL.md, and the base used."""
    repo, git, ref, chosen = _merge_base(root, base)
    try:
        diffed = repo.git.diff("--name-only", "--no-renames", ref, "--").splitlines()
    except git.GitCommandError as exc:
        why = exc.stderr.strip() or exc
        raise ChangesError(f"git diff against {chosen} failed: {why}") from None
    # paths are relative to the repo's top level, which may sit above the knowledge-base root
    top = Path(repo.working_tree_dir).resolve()
    skills = (*Path(root).resolve().relative_to(top).parts, "skills")
    paths = [Path(p).parts for p in set(diffed) | set(repo.untracked_files)]
    names = {p[len(skills)] for p in paths if len(p) > len(skills) and p[: len(skills)] == skills}
    return sorted(n for n in names if (Path(root) / "skills" / n / "SKILL.md").exists()), chosen


def ledger_change_problems(root: Path, base: str | None = None) -> tuple[list[Problem], str]:
    """What a change does to the ledger that a pull request must not do, judged by the base's keys:
    every row of the base's ledger must still be there, unedited; every added row must be signed
    by a key the *base* trusts when it trusts any (a change cannot vouch for itself by adding its
    own key), and no added row may carry a signature that does not verify."""
    from collections import Counter

    from kbase.validators.ledger import LEDGER_DIR, SHOWN, LedgerError, parse_line, sig_problem
    from kbase.validators.signing import TRUSTED_DIR, read_keys

    repo, git, ref, chosen = _merge_base(root, base)
    top = Path(repo.working_tree_dir).resolve()
    rel_root = Path(root).resolve().relative_to(top)
    rel_ledger = (rel_root / SHOWN).as_posix()
    rel_keys = (rel_root / LEDGER_DIR / TRUSTED_DIR).as_posix()

    def show(path: str) -> bytes:
        try:
            return repo.git.show(f"{ref}:{path}", stdout_as_string=False)
        except git.GitCommandError:
            return b""

    def text(path: str) -> str:
        return show(path).decode("utf-8", "replace")

    listed = repo.git.ls_tree("--name-only", ref, rel_keys + "/").splitlines()
    base_keys = [p for p in listed if p.endswith(".pub")]
    keys = read_keys((kf, functools.partial(text, kf)) for kf in base_keys)
    problems: list[Problem] = []
    current_keys = sorted(
        p.relative_to(top).as_posix() for p in (top / rel_keys).glob("*.pub") if p.is_file()
    )
    if sorted(base_keys) != current_keys or any(
        (top / k).read_text(encoding="utf-8").strip() != text(k).strip() for k in current_keys
    ):
        why = "the trusted keys change; keys are added by a maintainer, never in the same change "
        problems.append(Problem(path=f"{rel_keys}/", message=why + "as the rows they would sign"))
    # lines end at "\n" only, and are compared as bytes (ledger.py: U+2028, bytes not UTF-8)
    base_lines = [ln for ln in show(rel_ledger).split(b"\n") if ln.strip()]
    path = top / rel_ledger
    cur_lines = path.read_bytes().split(b"\n") if path.exists() else []
    if gone := Counter(base_lines) - Counter(ln for ln in cur_lines if ln.strip()):
        why = f"{gone.total()} row(s) of {chosen} edited or deleted; the ledger is append-only"
        problems.append(Problem(path=SHOWN, message=why))
    new = Counter(cur_lines) - Counter(base_lines)
    for lineno, raw in enumerate(cur_lines, start=1):
        if not raw.strip() or new[raw] <= 0:
            continue
        new[raw] -= 1
        row = parse_line(raw, SHOWN, lineno)
        if isinstance(row, LedgerError):
            problems.append(row.problem())
            continue
        untrusted = f"added row for {row['skill']} is not signed by a key that {chosen} trusts"
        if bad := sig_problem(keys, keys.check(row), row, f"{untrusted} (ledger/{TRUSTED_DIR}/)"):
            problems.append(Problem(path=SHOWN, line=lineno, field="sig", message=bad))
    return problems, chosen
