"""`kbase mine` without the CLI framework (kbase.cli sends it here first): typer and its
option machinery cost about a tenth of a second of every mine, and a mine with nothing new
is answered before pydantic or the miner are imported (issue #12: a no-op under 0.5 s,
10 new commits under 1 s; `KnowledgeBase.mine_noop`). It does what kbase.commands.archive.mine
does, through the same façade, and prints the same; errors go through the same translation
(commands.common). A command line this parser does not take exactly as typer would (another
option, a missing value, `--help`), or a terminal to draw a progress bar on, returns False
before anything is done, and the typer command runs.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

_VALUED = ("--repo", "--name", "--recipe", "--root", "--since")
_FLAGS = ("--json", "--full")


def parse_opts(
    argv: list[str], valued: tuple[str, ...], flags: tuple[str, ...]
) -> dict[str, str | bool] | None:
    """ARGV's options when they are only these (the last of a repeated one wins, as click
    does); None for anything else (another option, a missing value, `--help`). Also the stdio
    MCP server's (kbase/commands/mcp_fast.py)."""
    opts: dict[str, str | bool] = {}
    it = iter(argv)
    for arg in it:
        key, eq, value = arg.partition("=")
        if key in valued:
            if not eq:
                value = next(it, None)  # type: ignore[assignment]
                if value is None or value.startswith("--"):
                    return None  # a missing value: the full command says so
            opts[key] = value
        elif arg in flags:
            opts[arg] = True
        else:
            return None
    return opts


def parse(argv: list[str]) -> dict[str, str | bool] | None:
    """The options of `kbase mine ARGV` when they are only these; None for anything else."""
    opts = parse_opts(argv, _VALUED, _FLAGS)
    if not opts or not opts.get("--repo") or not opts.get("--name"):
        return None
    return opts


def noop_report(opts: dict[str, str | bool], t0: float) -> Any:
    """The no-op report (KnowledgeBase.mine_noop), or None when this cannot be shown to be a
    no-op; a root that does not resolve is left to the full command, which says why."""
    from kbase.api import KnowledgeBase
    from kbase.errors import KbaseError

    try:  # --root, then KBASE_ROOT, as typer's --root does
        kb = KnowledgeBase(root=str(opts.get("--root") or "") or None)
    except KbaseError:
        return None
    spec = opts.get("--recipe")
    report = kb.mine_noop(str(opts["--repo"]), str(opts["--name"]), str(spec) if spec else None)
    if report is not None:
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
        from kbase.commands.jsonout import print_json  # no CLI framework there

        print_json(report.as_dict())
    else:
        from rich.console import Console

        out = Console()
        for line in report.summary():
            out.print(line, highlight=False)
    return True


def _bar_wanted() -> bool:
    """Whether the typer command would draw a progress bar (rich's Console.is_terminal for
    stderr, known here without importing rich): then it runs, bar and all."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty or "TTY_COMPATIBLE" in os.environ or "FORCE_COLOR" in os.environ


def _mine(opts: dict[str, str | bool]) -> Any:
    # pydantic looks for plugins (observability hooks for an application's models) when it
    # builds its first validator, by reading the entry points of every installed distribution:
    # ~0.07 s of CPU with 200 installed, for models that are kbase's own records. A value the
    # user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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
