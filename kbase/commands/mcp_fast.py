"""`kbase [--default-root PATH] mcp [--root PATH] [--no-index] [--allow-write]` without typer,
click or rich (issue #27): an agent runtime starts the server and waits for `initialize`, and
building the typer app was ~0.3 s of the ~1 s budget on a busy 2-core machine. Anything else
(help, --http, an option this path does not know, a bad root) goes to the typer command, which
prints what it always did.
"""

from __future__ import annotations

import os


def fast_mcp(argv: list[str]) -> bool:
    """Serve MCP on stdio when ARGV is plainly that and return True, else False."""
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

    try:
        run(
            root=root,
            index_if_missing=not opts.get("--no-index"),
            allow_write=allow_write,
            early=early,
        )
    except KeyboardInterrupt:
        pass
    return True
