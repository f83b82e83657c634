"""Core sub-commands: index, search, get, lint."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from kbase.commands.common import JsonOpt, RootOpt, console, err_console, fail, print_json, root_path


def lint(paths: List[Path] = typer.Argument(None, help="SKILL.md files or skill folders (default: all)"),
         root: Optional[str] = RootOpt, as_json: bool = JsonOpt) -> None:
    """Check skills against the format; print `path:line: message` per problem, exit 1 on any."""
    from kbase.ingest.skills import find_skill_files, lint_paths

    r = root_path(root)
    targets = [p.resolve() for p in paths] if paths else find_skill_files(r)
    problems = lint_paths(targets, r)
    if as_json:
        print_json({"checked": len(targets), "problems": [p.model_dump() for p in problems]})
    else:
        for p in problems:
            typer.echo(str(p))
        err_console.print(f"{len(targets)} skill(s) checked, {len(problems)} problem(s)")
    if problems:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command()(lint)
