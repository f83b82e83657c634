"""The repository a mine reads, driven through the `git` command alone.

Plain subprocess calls instead of gitpython keep `kbase mine` light to start (gitpython
costs more to import than a no-op mine takes to run) and name the git directory in every
call, so a bare mirror without a `config` file, a worktree and a plain clone work alike.
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from kbase.errors import KbaseError

# variables that would point git somewhere other than the repository we name
_GIT_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_PREFIX")


class GitFailed(KbaseError):
    """A git command exited non-zero; `.stderr` holds what it said."""

    def __init__(self, args: list[str], status: int, stderr: str):
        self.stderr = stderr
        self.status = status
        super().__init__(f"git {' '.join(args)} exited with {status}: {stderr.strip()}")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in _GIT_ENV}


class GitRepo:
    """One repository, by its git directory."""

    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self.head = ""  # the commit HEAD names, once `open_repo` has read it

    def run(self, *args: str, check: bool = True) -> str:
        proc = subprocess.run(
            ["git", f"--git-dir={self.git_dir}", *args],
            capture_output=True,
            env=_env(),
        )
        if check and proc.returncode != 0:
            raise GitFailed(list(args), proc.returncode, proc.stderr.decode("utf-8", "replace"))
        return proc.stdout.decode("utf-8", "replace")

    def ok(self, *args: str) -> bool:
        """Whether the command exits 0 (`merge-base --is-ancestor` and the like)."""
        return (
            subprocess.run(
                ["git", f"--git-dir={self.git_dir}", *args],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                env=_env(),
            ).returncode
            == 0
        )


def find_git_dir(path: Path) -> str | None:
    """The git directory of `path` when `path` is the top of a work tree or a git directory
    itself (bare, with or without `config`); None otherwise, a folder inside a work tree
    included."""
    proc = subprocess.run(
        ["git", "-C", str(path), "rev-parse", "--absolute-git-dir", "--show-cdup"],
        capture_output=True,
        env=_env(),
    )
    if proc.returncode != 0:
        return None
    lines = proc.stdout.decode("utf-8", "surrogateescape").split("\n")
    if not lines[0] or (len(lines) > 1 and lines[1].strip()):
        return None  # `--show-cdup` says `path` is below the top of its work tree
    return lines[0]


def origin_url(git_dir: str) -> str | None:
    """https://host/owner/repo for the `origin` remote (scp-style and .git endings undone)."""
    out = subprocess.run(
        ["git", f"--git-dir={git_dir}", "config", "--get", "remote.origin.url"],
        capture_output=True,
        text=True,
        env=_env(),
    )
    url = out.stdout.strip()
    if out.returncode != 0 or not url:
        return None
    m = re.match(r"^(?:ssh://)?git@([^:/]+)[:/](.+?)(?:\.git)?/?$", url)
    if m:
        return f"https://{m.group(1)}/{m.group(2)}"
    m = re.match(r"^(?:https?|git)://(?:[^@/]+@)?([^/]+)/(.+?)(?:\.git)?/?$", url)
    if m:
        return f"https://{m.group(1)}/{m.group(2)}"
    return None  # a local path or something else without a web page
