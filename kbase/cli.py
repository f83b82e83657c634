"""The `kbase` command. Each area registers its own sub-commands from kbase/commands/; the typer
app that holds them is kbase/cli_app.py.

A `kbase mine` with nothing new is answered without it (kbase/mine_cli.py), before the CLI
framework and pydantic are imported, which were most of a no-op's time (issue #12; 0.18 s
against 0.77 s through typer, 3.8x, measured at issue #24). So is `kbase mcp` on stdio
(kbase/commands/mcp_fast.py), whose handshake must come within a second (initialize 0.32 s
against 0.64 s through typer at load ~8). Other such paths paid under 1.3x and are gone.

Exit codes (docs/agents.md): 0 success (a search with no hits too: it says so on stderr),
1 the command ran and found problems (lint errors, a failing check, an unknown id),
2 bad usage or input (a wrong option, a root that is not a knowledge base, a missing extra).
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # `from kbase.cli import app` (tests, embedding programs): the typer app, built on first use
    if name == "app":
        from kbase.cli_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main() -> None:
    import sys

    argv = sys.argv[1:]
    if argv[:1] == ["mine"]:
        from kbase.mine_cli import run as quick_mine

        if quick_mine(argv[1:]):
            return
    elif "mcp" in argv[:3]:
        from kbase.commands.mcp_fast import fast_mcp

        if fast_mcp(argv):
            return
    from kbase.cli_app import run

    run()


if __name__ == "__main__":
    main()
