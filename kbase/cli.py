"""The `kbase` command. Each area registers its own sub-commands from kbase/commands/; the typer
app that holds them is kbase/cli_app.py.

`kbase mine` is answered without it (kbase/mine_cli.py): a mine with nothing new is decided
before the CLI framework and pydantic are imported, which were most of a no-op's time (issue #12;
3.7x faster than through typer). So is `kbase mcp` on stdio (kbase/commands/mcp_fast.py), whose
handshake must come within a second. (`kbase search --json` had such a path too; it was 1.14-1.22x
faster than the typer command, which now answers it.)

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


def entry() -> None:
    """The `kbase` console script (and `python -m kbase.cli`): a process of its own, so a search
    or a mine that finished leaves with os._exit once its output is flushed. Tearing the
    interpreter down (the ONNX session, the loaded index, pydantic's schemas, the parsers, every
    module, object by object) cost ~0.2 s of a cold search's CPU and ~0.1 s of a mine's after
    the last byte was written (issues #11, #12). Every file a mine wrote is closed and renamed
    into place by then, and its git processes reaped; a process with other threads still running
    (or logging handlers) exits the usual way."""
    import sys
    import threading

    code: object = 0
    try:
        main()
    except SystemExit as exc:
        code = exc.code
    quiet = "logging" not in sys.modules or sys.argv[1:2] == ["search"]
    if sys.argv[1:2] in (["search"], ["mine"]) and quiet and threading.active_count() == 1:
        if code is None or isinstance(code, int):
            _leave(code or 0)
    raise SystemExit(code)


def _leave(code: int) -> None:
    import os
    import sys

    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except BaseException:  # noqa: BLE001 - e.g. a closed pipe: the ordinary exit reports it
        return
    os._exit(code)


if __name__ == "__main__":
    entry()
