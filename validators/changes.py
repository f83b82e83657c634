"""Which skills a branch changed: committed since the merge base, staged, unstaged and untracked."""

from __future__ import annotations

from pathlib import Path

from kbase.errors import KbaseError

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


def changed_paths(root: Path, base: str | None = None) -> tuple[list[str], str]:
    """(paths relative to the repo, the base used). Diffs the merge base against the working tree."""
    repo, git = _repo(root)
    candidates = [base] if base else list(DEFAULT_BASES)
    chosen = None
    for rev in candidates:
        try:
            repo.commit(rev)
            chosen = rev
            break
        except (git.BadName, ValueError, git.GitCommandError):
            continue
    if chosen is None:
        if base:
            raise ChangesError(f"--base {base!r} is not a revision in this repository")
        chosen = "HEAD"
    try:
        merge_base = repo.merge_base(chosen, "HEAD")
        ref = merge_base[0].hexsha if merge_base else chosen
        diffed = repo.git.diff("--name-only", "--no-renames", ref, "--").splitlines()
    except git.GitCommandError as exc:
        raise ChangesError(
            f"git diff against {chosen} failed: {exc.stderr.strip() or exc}"
        ) from None
    paths = sorted(set(diffed) | set(repo.untracked_files))
    # make them relative to the knowledge-base root when it sits below the repo's top level
    top = Path(repo.working_tree_dir).resolve()
    rel_root = Path(root).resolve().relative_to(top) if Path(root).resolve() != top else Path()
    out = []
    for p in paths:
        pp = Path(p)
        if rel_root.parts and pp.parts[: len(rel_root.parts)] != rel_root.parts:
            continue
        out.append(str(Path(*pp.parts[len(rel_root.parts) :])))
    return out, chosen


def changed_skills(root: Path, base: str | None = None) -> tuple[list[str], str]:
    """Names of skill folders with a changed file that still have a SKILL.md, and the base used."""
    paths, used = changed_paths(root, base)
    names = set()
    for p in paths:
        parts = Path(p).parts
        if len(parts) >= 2 and parts[0] == "skills":
            names.add(parts[1])
    return sorted(n for n in names if (Path(root) / "skills" / n / "SKILL.md").exists()), used
