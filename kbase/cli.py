"""The `kbase` command; the typer app is kbase/cli_app.py. A no-op `kbase mine`
(kbase/mine_cli.py: 0.18 s against 0.77 s through typer, issue #24) and `kbase mcp` on stdio
(fast_mcp below: initialize 0.32 s against 0.64 s through typer at load ~8) run without
it. Other such paths paid under 1.3x and are gone. Exit codes: docs/agents.md."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
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

    sys.stdout.write(json.dumps(obj, ensure_ascii=False, indent=None, default=str) + "\n")


def fast_mcp(argv: list[str]) -> bool:
    """Serve MCP on stdio when ARGV is plainly that and return True, else False: an agent runtime
    waits for `initialize`, and building the typer app was ~0.3 s of a ~1 s budget on a busy
    2-core machine (issue #27). Anything else (help, --http, an option this path does not know,
    a bad root) goes to the typer command, which prints what it always did."""
    from kbase.mine_cli import parse_opts

    args, default_root = list(argv), None
    if args[:1] == ["--default-root"] and len(args) >= 2:
        default_root, args = args[1], args[2:]
    if args[:1] != ["mcp"]:
        return False
    opts: dict | None = parse_opts(
        args[1:], ("--root", "--log-level"), ("--no-index", "--allow-write")
    )
    if opts is None:
        return False  # --http, --help, anything unknown: typer's
    if default_root:
        os.environ["KBASE_DEFAULT_ROOT"] = default_root
    # pydantic's plugin lookup reads every installed distribution's entry points (~20 ms) for
    # an application's telemetry hooks; kbase has none. A value the user set is kept.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from kbase.config import RootError, find_root

    try:
        root = find_root(opts.get("--root") or None)
    except RootError:
        return False  # typer reports it, with its exit code
    from kbase.serve.mcp_early import EarlyAnswers, log_to_stderr

    log_to_stderr(opts.get("--log-level", "info"))
    allow_write = bool(opts.get("--allow-write"))
    # before the SDK's import (~0.8 s of CPU): the handshake is answered meanwhile
    early = EarlyAnswers(allow_write=allow_write)
    from kbase.serve.mcp_server import run

    index = not opts.get("--no-index")
    with contextlib.suppress(KeyboardInterrupt):
        run(root=root, index_if_missing=index, allow_write=allow_write, early=early)
    return True


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == ["mine"]:
        from kbase.mine_cli import run as quick_mine

        if quick_mine(argv[1:]):
            return
    elif "mcp" in argv[:3] and fast_mcp(argv):
        return
    from kbase.cli_app import run

    piped = _pipe_id()
    try:
        run()
    except SystemExit as e:
        # Click and rich exit 1 when the reader of stdout is gone (`kbase search ... | head`),
        # and 1 means "found something" here: exit as a Unix tool killed by SIGPIPE does
        if e.code == 1 and piped is not None and _reader_gone(piped):
            raise SystemExit(141) from None
        raise


def _pipe_id() -> tuple[int, int] | None:
    """(device, inode) of stdout when it is a pipe, else None."""
    try:
        st = os.fstat(1)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISFIFO(st.st_mode) else None


def _reader_gone(piped: tuple[int, int]) -> bool:
    """The pipe on stdout lost its reader: poll reports an error on it (Click leaves it in
    place), or it was swapped for /dev/null (rich does that before it exits)."""
    import select

    if _pipe_id() != piped:
        return True
    poll = select.poll()
    poll.register(1, select.POLLOUT)
    return any(ev & select.POLLERR for _, ev in poll.poll(0))


if __name__ == "__main__":
    main()
