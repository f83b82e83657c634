"""`kbase mine` when nothing is new, answered for the CLI (kbase.cli) before the CLI framework,
pydantic or the miner are imported (they cost most of a no-op's time: issue #12 asks for a no-op
under 0.5 s). It reads only what kbase.ingest.mine_state describes, and asks git for HEAD.

The answer is "no-op" only when everything `kbase.ingest.mining.mine` would compare is known
to be unchanged: the state's last commit is HEAD, the same source and archive name, the same
recipe file bytes (mine_state.recipe_fingerprint) and, when the upstream URL came from
`origin`, the same `origin`. Anything else, or a command line this parser does not take
exactly as the full one would (another option, a missing value, `--help`), returns False
and the full command runs, with its own checks and error messages; so this path never
prints an error and never writes anything but what a no-op writes.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from kbase.config import RootError, find_root
from kbase.ingest.gitrepo import GitFailed, GitRepo, find_git_dir, origin_url
from kbase.ingest.mine_state import (
    NOOP_REASON,
    PROGRESS_FILE,
    STATE_VERSION,
    MineReport,
    MiningError,
    archive_dir,
    read_state,
    recipe_file,
    recipe_fingerprint,
)

_VALUED = ("--repo", "--name", "--recipe", "--root")
_FLAGS = ("--json",)


def parse(argv: list[str]) -> dict[str, str | bool] | None:
    """The options of `kbase mine ARGV` when they are only these (the last of a repeated one
    wins, as click does); None for anything else."""
    opts: dict[str, str | bool] = {}
    it = iter(argv)
    for arg in it:
        key, eq, value = arg.partition("=")
        if key in _VALUED:
            if not eq:
                value = next(it, None)  # type: ignore[assignment]
                if value is None or value.startswith("--"):
                    return None  # a missing value: the full command says so
            opts[key] = value
        elif arg in _FLAGS:
            opts[arg] = True
        else:
            return None
    if not opts.get("--repo") or not opts.get("--name"):
        return None
    return opts


def noop_report(opts: dict[str, str | bool], t0: float) -> MineReport | None:
    """The no-op report, after doing what a no-op does to the archive folder; None when this
    cannot be shown to be a no-op."""
    name, repo_arg = str(opts["--name"]), str(opts["--repo"])
    try:
        root = find_root(str(opts.get("--root") or "") or None)  # then KBASE_ROOT, as --root
        folder = archive_dir(root, name)
        state = read_state(folder) if folder.is_dir() else None
        spec = opts.get("--recipe")
        recipe = recipe_file(str(spec) if spec else None, name, root)
    except (RootError, MiningError, OSError):
        return None
    src = Path(repo_arg).expanduser()
    source = str(src.resolve())
    if not state or state.get("version") != STATE_VERSION or state.get("repo") != name:
        return None
    recorded = state.get("recipe_source")
    if state.get("source") != source or not isinstance(recorded, dict):
        return None
    try:
        if recorded.get("file") != recipe_fingerprint(recipe):
            return None
    except OSError:
        return None
    git_dir = find_git_dir(src) if src.is_dir() else None
    if git_dir is None:
        return None
    try:
        shallow, head = GitRepo(git_dir).run("rev-parse", "--is-shallow-repository", "HEAD").split()
    except (GitFailed, ValueError):
        return None
    if shallow != "false" or head != state.get("last_sha"):
        return None
    if recorded.get("origin") and origin_url(git_dir) != state.get("upstream"):
        return None
    # what mining.mine does to the folder on a no-op: leftovers of a killed run go
    for p in folder.glob(".*.tmp.*"):
        try:
            p.unlink()
        except OSError:
            pass
    (folder / PROGRESS_FILE).unlink(missing_ok=True)
    report = MineReport(repo=name, source=source, mode="noop", head=head, range=f"{head}..{head}")
    report.reason = NOOP_REASON
    report.seconds = round(time.perf_counter() - t0, 3)
    return report


def run(argv: list[str]) -> bool:
    """Answer `kbase mine ARGV` here when it is a no-op (True); False: run the full command."""
    t0 = time.perf_counter()
    opts = parse(argv)
    report = noop_report(opts, t0) if opts is not None else None
    if report is None:
        return False
    if opts and opts.get("--json"):
        import json

        # kbase.commands.common.print_json, without importing the CLI framework
        sys.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False, default=str) + "\n")
    else:
        from rich.console import Console

        out = Console()
        for line in report.summary():
            out.print(line, highlight=False)
    return True
