"""The `kbase` command's entry point (`kbase.cli:main`, `python -m kbase.cli`).

The command itself (typer, its sub-commands) lives in kbase.cli_app and is imported only when
needed: a `kbase mine` with nothing new is answered by kbase.mine_cli before the CLI
framework and pydantic are imported (they are most of a no-op's time).
"""

from __future__ import annotations

import sys
from typing import Any


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["mine"]:
        from kbase.mine_cli import run as quick_mine

        if quick_mine(argv[1:]):
            return
    from kbase.cli_app import main as run_cli

    run_cli()


def __getattr__(name: str) -> Any:
    # `from kbase.cli import app` (tests, docs tooling, typer's own runner) still works
    if name in ("app", "COMMAND_MODULES"):
        from kbase import cli_app

        return getattr(cli_app, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
