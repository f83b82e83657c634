"""`kbase mine` without the CLI framework (kbase.cli sends it here first): typer and its
option machinery cost about a tenth of a second of every mine, and a mine with nothing new
is answered before pydantic or the miner are imported (issue #12: a no-op under 0.5 s,
10 new commits under 1 s). It does what kbase.commands.archive.mine does, through the same
façade, and prints the same; errors go through the same translation (commands.common).

The no-op answer needs everything `kbase.ingest.mining.mine` would compare to be unchanged:
the state's last commit is HEAD, the same source and archive name, the same recipe file bytes
(mine_state.recipe_fingerprint) and, when the upstream URL came from `origin`, the same
`origin`. A command line this parser does not take exactly as typer would (another option, a
missing value, `--help`), or a terminal to draw a progress bar on, returns False before
anything is done, and the typer command runs.
"""

from __future__ import annotations

import os
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

_VALUED = ("--repo", "--name", "--recipe", "--root", "--since")
_FLAGS = ("--json", "--full")


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
    """Run `kbase mine ARGV` here (True), or leave it to the typer command (False)."""
    t0 = time.perf_counter()
    opts = parse(argv)
    if opts is None or _bar_wanted():
        return False
    as_json = bool(opts.get("--json"))
    report = None
    if not opts.get("--since") and not opts.get("--full"):
        report = noop_report(opts, t0)
    if report is None:
        report = _mine(opts)
    if as_json:
        import json

        # kbase.commands.common.print_json, without importing the CLI framework
        sys.stdout.write(json.dumps(report.as_dict(), ensure_ascii=False, default=str) + "\n")
    else:
        from rich.console import Console

        out = Console()
        for line in report.summary():
            out.print(line, highlight=False)
    return True


def _bar_wanted() -> bool:
    """Whether the typer command would draw a progress bar (commands.common.LazyConsole
    .is_terminal for stderr): then it runs, bar and all."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ


def _mine(opts: dict[str, str | bool]) -> MineReport:
    # pydantic looks for plugins (observability hooks for an application's models) when it
    # builds its first validator, by reading the entry points of every installed distribution:
    # ~0.07 s of CPU with 200 installed, for models that are kbase's own records. A value the
    # user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from kbase.commands.plugins_off import skip_plugin_loader

    skip_plugin_loader()  # its module imports importlib.metadata, for nothing with plugins off
    from kbase.errors import KbaseError

    try:
        from kbase.api import KnowledgeBase

        # typer's --root takes KBASE_ROOT as its value when absent (envvar=), so errors read alike
        root = str(opts.get("--root") or "") or os.environ.get("KBASE_ROOT") or None
        return KnowledgeBase(root=root).mine(
            str(opts["--repo"]),
            str(opts["--name"]),
            str(opts.get("--recipe") or "") or None,
            since=str(opts.get("--since") or "") or None,
            full=bool(opts.get("--full")),
        )
    except KbaseError as exc:
        from kbase.commands.common import error_exit

        raise SystemExit(error_exit(exc, bool(opts.get("--json"))).exit_code) from None
