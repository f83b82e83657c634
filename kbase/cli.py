"""The `kbase` command; the typer app is kbase/cli_app.py. A no-op `kbase mine`
(kbase/mine_cli.py: 0.18 s against 0.77 s through typer, issue #24) and `kbase mcp` on stdio
(kbase/commands/mcp_fast.py: initialize 0.32 s against 0.64 s through typer at load ~8) run
without it. Other such paths paid under 1.3x and are gone. Exit codes: docs/agents.md.
"""

from __future__ import annotations

from typing import Any


def __getattr__(name: str) -> Any:
    # `from kbase.cli import app` (tests, embedding programs): the typer app, built on first use
    if name == "app":
        from kbase.cli_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def print_json(obj: Any) -> None:
    """`--json` output, for the typer commands and the no-op mine path (no typer there)."""
    import json
    import sys

    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=None, default=str) + "\n")


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
