"""Options and output helpers shared by every sub-command."""

from __future__ import annotations

import json
import sys
from typing import Any

import typer
from rich.console import Console

RootOpt = typer.Option(
    None, "--root", envvar="KBASE_ROOT", help="knowledge-base root (holds skills/ and pr_archive/)"
)
JsonOpt = typer.Option(False, "--json", help="print machine-readable JSON")

console = Console()
err_console = Console(stderr=True)


def print_json(obj: Any) -> None:
    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=None, default=str) + "\n")


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: message` to stderr (no markup parsing, no wrapping) and return the Exit to raise."""
    from rich.text import Text

    err_console.print(
        Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True
    )
    return typer.Exit(code)


def root_path(root: str | None):
    from kbase.config import find_root

    return find_root(root)
