"""The `kbase` command. Each area registers its own sub-commands from kbase/commands/; the typer
app that holds them is kbase/cli_app.py.

`kbase search ... --json` is answered without it (kbase/commands/search_fast.py): importing typer,
click and building the app was a third of a cold search (issue #11). Anything that path does not
take exactly as typer would (help, an unknown option, an error to report) goes to the app. So is
`kbase mine` (kbase/mine_cli.py): a mine with nothing new is decided before the CLI framework and
pydantic are imported, which were most of a no-op's time (issue #12).

Exit codes (docs/agents.md): 0 success (a search with no hits too: it says so on stderr),
1 the command ran and found problems (lint errors, a failing check, an unknown id),
2 bad usage or input (a wrong option, a root that is not a knowledge base, a missing extra).
"""

from __future__ import annotations

from typing import Any

# Each sub-command (and command group) with the module of kbase/commands/ that registers it, in
# `kbase --help` order (commands, then groups). A module is imported, and its commands built,
# when one of its commands is first looked up: `kbase search` builds no other command's options
# and imports no other area's module. tests/test_cli_startup.py checks this against register().
COMMAND_MODULES = {
    **dict.fromkeys(("index", "search", "get", "list", "lint"), "core"),
    **dict.fromkeys(("verify", "audit", "new", "check", "merge-ledger"), "validate"),
    **dict.fromkeys(("mine", "history"), "archive"),
    **dict.fromkeys(("mcp", "serve", "export"), "serve"),
    "keygen": "trust",
    **dict.fromkeys(("feedback", "propose"), "experience"),
    "init": None,  # defined in kbase/cli_app.py
    "recipe": "archive",
    "ledger": "trust",
}


def __getattr__(name: str) -> Any:
    # `from kbase.cli import app` (tests, embedding programs): the typer app, built on first use
    if name == "app":
        from kbase.cli_app import app

        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def main(leave_at_once: bool = False) -> None:
    """`leave_at_once`: a process of its own (the `kbase` script, `python -m kbase.cli`) ends a
    fast search with os._exit once its answer is flushed. Tearing the interpreter down (the ONNX
    session, the loaded index, every module) was ~0.2 s of a cold search's CPU time and wall
    time here (issue #11), and a read-only search has nothing left to finish."""
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
    else:
        from kbase.commands.search_fast import fast_search

        code = fast_search(argv)
        if code is not None:
            if leave_at_once:
                _leave(code)
            raise SystemExit(code)
    from kbase.cli_app import run

    run()


def entry() -> None:
    """The `kbase` console script (and `python -m kbase.cli`): a process of its own, so a fast
    search, and a mine that finished, leave with os._exit once their output is flushed.
    Tearing the interpreter down (the ONNX session, the loaded index, pydantic's schemas, the
    parsers, every module, object by object) cost ~0.2 s of a cold search's CPU and ~0.1 s of a
    mine's after the last byte was written (issues #11, #12). Every file a mine wrote is closed
    and renamed into place by then, and its git processes reaped; a process with other threads
    still running (or logging handlers) exits the usual way."""
    import sys

    main(leave_at_once=True)
    if sys.argv[1:2] != ["mine"] or "logging" in sys.modules:
        return
    import threading

    if threading.active_count() == 1:
        _leave(0)


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
