"""The repository a mine reads, its `.state.json` and its report, with the standard library
only: the no-op check (`noop_report`, from kbase.mine_cli) runs before the CLI, pydantic or the
miner load. Plain `git` calls (gitpython costs more to import than a no-op mine takes) name the
git directory, so a bare mirror, a worktree and a clone work alike. The state names the recipe
file by the hash of its bytes, so "nothing new" needs no recipe parse."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import stat
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from kbase.closed_sets import NAME_RE
from kbase.errors import KbaseError

# variables that would point git somewhere other than the repository we name
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


class GitFailed(KbaseError):
    """A git command exited non-zero; the message holds what it said."""


def _git(git_dir: str | None, *args: str, cwd: Path | None = None):
    """`git [--git-dir=DIR] ARGS` (in `cwd`), without the variables that would redirect it."""
    env = {k: v for k, v in os.environ.items() if k not in _GIT_ENV}
    where = [f"--git-dir={git_dir}"] if git_dir else ["-C", str(cwd)]
    return subprocess.run(["git", *where, *args], capture_output=True, env=env)


class GitRepo:
    """One repository, by its git directory."""

    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self.head = ""  # the commit HEAD names, once `open_repo` has read it

    def run(self, *args: str) -> str:
        proc = _git(self.git_dir, *args)
        if proc.returncode != 0:
            err = proc.stderr.decode("utf-8", "replace").strip()
            raise GitFailed(f"git {' '.join(args)} exited with {proc.returncode}: {err}")
        return proc.stdout.decode("utf-8", "replace")

    def ok(self, *args: str) -> bool:
        """Whether the command exits 0 (`merge-base --is-ancestor` and the like)."""
        return _git(self.git_dir, *args).returncode == 0


def find_git_dir(path: Path) -> str | None:
    """The git directory of `path`, the top of a work tree or a git directory (bare or not);
    None otherwise, a folder inside a work tree included."""
    proc = _git(None, "rev-parse", "--absolute-git-dir", "--show-cdup", cwd=path)
    if proc.returncode != 0:
        return None
    lines = proc.stdout.decode("utf-8", "surrogateescape").split("\n")
    if not lines[0] or (len(lines) > 1 and lines[1].strip()):
        return None  # `--show-cdup` says `path` is below the top of its work tree
    return lines[0]


_REMOTE = re.compile(
    r"^(?:(?:ssh://)?git@([^:/]+)[:/]|(?:https?|git)://(?:[^@/]+@)?([^/]+)/)(.+?)(?:\.git)?/?$"
)


def origin_url(git_dir: str) -> str | None:
    """https://host/owner/repo for the `origin` remote (scp-style and .git endings undone)."""
    out = _git(git_dir, "config", "--get", "remote.origin.url")
    m = _REMOTE.match(out.stdout.decode("utf-8", "replace").strip())
    if out.returncode != 0 or not m:
        return None  # a local path or something else without a web page
    return f"https://{m.group(1) or m.group(2)}/{m.group(3)}"


ARCHIVE_DIR = "pr_archive"  # kbase.ingest.cards.ARCHIVE_DIR, without importing the card code
RECIPES_DIR = Path(ARCHIVE_DIR) / "recipes"
STATE_FILE = ".state.json"
STATE_VERSION = 1
NOOP_REASON = "nothing new since the last mine"


class MiningError(KbaseError):
    """A problem with the repository or the archive that the user must fix; the message says how."""


def open_repo(source: str | os.PathLike) -> GitRepo:
    """The git repository at `source`, refusing paths that are not a usable clone."""
    p = Path(source).expanduser()
    if not p.exists():
        raise MiningError(f"{p}: no such directory")
    git_dir = find_git_dir(p) if p.is_dir() else None
    if git_dir is None:
        why = f"{p}: not a git repository (expected a local clone; run `git clone <url>` first)"
        raise MiningError(why)
    repo = GitRepo(git_dir)
    try:
        shallow, repo.head = repo.run("rev-parse", "--is-shallow-repository", "HEAD").split()[:2]
    except (GitFailed, ValueError):
        raise MiningError(f"{p}: the repository has no commits on HEAD") from None
    if shallow == "true":
        depth = len(repo.run("rev-list", "--first-parent", "HEAD").split())
        raise MiningError(
            f"{p}: shallow clone (only {depth} first-parent commit(s) are present, "
            "older PRs are missing); run `git fetch --unshallow` in it, then mine again"
        )
    return repo


@dataclass
class MineReport:
    repo: str
    source: str
    mode: str  # full | incremental | since | noop
    head: str
    range: str
    reason: str = ""
    commits: int = 0
    prs: int = 0
    without_pr: int = 0
    without_pr_sample: list[dict] = field(default_factory=list)
    behind_merges: int = 0  # commits brought in by merges that name no PR, mined like the main line
    direct_pushes: int = 0  # commits with no PR number that got a commit card
    warnings: list[str] = field(default_factory=list)  # missing blobs and the like
    # blobs parsed (incrementally: from another version's tree), and spared by the cache
    blobs_parsed: int = 0
    blobs_incremental: int = 0
    blobs_cached: int = 0
    commits_cached: int = 0  # commits whose facts came from the cache: git was not asked
    cards_cached: int = 0  # commits whose card (built from their facts) came from the cache
    written: int = 0
    unchanged: int = 0
    removed: list[str] = field(default_factory=list)
    orphaned: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    def summary(self) -> tuple[str, str]:
        """The two lines `kbase mine` prints without --json (rich markup)."""
        kept = f", kept with Notes {self.orphaned}" if self.orphaned else ""
        return (
            f"[bold]{self.repo}[/bold]: {self.mode} ({self.reason or self.range})",
            f"  commits {self.commits}, PRs {self.prs}, without a PR number {self.without_pr}; "
            f"cards written {self.written}, unchanged {self.unchanged}, "
            f"removed {len(self.removed)}{kept}; {self.seconds:.2f}s",
        )


MAX_RECIPE_BYTES = 1 << 20  # recipes are a few KB; `--recipe /dev/zero` must not read forever


def archive_dir(root: Path, name: str) -> Path:
    """pr_archive/<name>; a name that is not kebab-case (`../..`) would leave pr_archive/."""
    if not NAME_RE.match(name):
        raise MiningError(f"archive name {name!r} must be kebab-case (lowercase, digits, hyphens)")
    return root / ARCHIVE_DIR / name


def read_recipe(path: Path) -> bytes:
    """A regular file's bytes (a FIFO or device would block or never end), at most
    MAX_RECIPE_BYTES; OSError otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        data = fh.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise OSError(errno.EFBIG, f"larger than {MAX_RECIPE_BYTES} bytes", str(path))
    return data


def atomic_write(path: Path, text: str) -> None:
    """A temporary file, then a rename: a killed process leaves the old file or the new one."""
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)
    os.replace(tmp, path)


def sweep_temporary(folder: Path) -> None:
    """The temporary files of a killed run's atomic writes go."""
    for p in folder.glob(".*.tmp.*"):
        with contextlib.suppress(OSError):
            p.unlink()


def read_state(folder: Path) -> dict | None:
    p = folder / STATE_FILE
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = f"{p}: unreadable state file ({exc}); delete it or run with --full"
        raise MiningError(why) from None
    if not isinstance(data, dict) or "last_sha" not in data:
        raise MiningError(f"{p}: state file has no 'last_sha'; delete it or run with --full")
    return data


def recipe_file(spec: str | None, name: str, root: Path) -> Path | None:
    """The file `--recipe spec` names (a path, or a name under pr_archive/recipes/), or with no
    spec the recipe named like the archive; None when there is none. A spec that names nothing
    raises FileNotFoundError (kbase.ingest.recipes.find_recipe turns it into a located problem)."""
    if spec and Path(spec).exists():
        return Path(spec)
    if spec and Path(spec).suffix in (".yaml", ".yml"):
        raise FileNotFoundError(spec)
    named = [root / RECIPES_DIR / f"{spec or name}{ext}" for ext in (".yaml", ".yml")]
    found = next((c for c in named if c.exists()), None)
    if found is None and spec:
        raise FileNotFoundError(spec)
    return found


def recipe_fingerprint(path: Path | None) -> str:
    """The recipe file a mine used, by its bytes ("none": a mine without a recipe file)."""
    return hashlib.sha256(read_recipe(path)).hexdigest()[:32] if path is not None else "none"


def noop_report(root: Path, repo_arg: str, name: str, recipe_spec: str | None) -> MineReport | None:
    """The report of a mine with nothing new (its work on the folder done), or None unless all
    that mining.mine compares is unchanged: HEAD is the last commit mined, the source, name and
    recipe file bytes are the same, and so is `origin` where the upstream URL came from it."""
    src = Path(repo_arg).expanduser()
    source = str(src.resolve())
    try:
        folder = archive_dir(root, name)
        state = read_state(folder) if folder.is_dir() else None
        recipe = recipe_file(recipe_spec, name, root)
        if not state or state.get("version") != STATE_VERSION or state.get("repo") != name:
            return None
        recorded = state.get("recipe_source")
        if state.get("source") != source or not isinstance(recorded, dict):
            return None
        if recorded.get("file") != recipe_fingerprint(recipe):
            return None
        repo = open_repo(src)
    except (MiningError, OSError):
        return None
    if repo.head != state.get("last_sha"):
        return None
    if recorded.get("origin") and origin_url(repo.git_dir) != state.get("upstream"):
        return None
    sweep_temporary(folder)  # what mining.mine does to the folder on a no-op
    return MineReport(name, source, "noop", repo.head, f"{repo.head}..{repo.head}", NOOP_REASON)
