"""Agent access: `kbase mcp`, `kbase serve`, `kbase export` (each imports its server inside)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from kbase.commands.common import JsonOpt, RootOpt, console, fail, kb, print_json
from kbase.config import find_root

NoIndexOpt = typer.Option(False, "--no-index", help="do not build a missing index at start-up")


def mcp(
    http: str | None = typer.Option(
        None, metavar="HOST:PORT", help="serve streamable HTTP on HOST:PORT instead of stdio"
    ),
    no_index: bool = NoIndexOpt,
    log_level: str = typer.Option("info", "--log-level", help="stderr log level"),
    allow_write: bool = typer.Option(
        False, "--allow-write", help="also offer the write tools feedback and propose"
    ),
    root: str | None = RootOpt,
) -> None:
    """Run the MCP server (stdio by default): search, get, history, list, stale (+ writes)."""
    from kbase.serve.mcp_early import log_to_stderr
    from kbase.serve.mcp_server import parse_hostport, run

    log_to_stderr(log_level)
    if http:
        parse_hostport(http)  # a bad HOST:PORT is an InvalidArgument before any start-up work
    with contextlib.suppress(KeyboardInterrupt):
        run(root=find_root(root), http=http, index_if_missing=not no_index, allow_write=allow_write)


def serve(
    host: str = typer.Option("127.0.0.1", help="interface to bind (default: loopback only)"),
    port: int = typer.Option(8765, "--port", min=1, max=65535),
    no_index: bool = NoIndexOpt,
    log_level: str = typer.Option("warning", help="uvicorn/kbase log level (stderr)"),
    allow_write: bool = typer.Option(
        False, "--allow-write", help="also accept POST /feedback and POST /propose"
    ),
    root: str | None = RootOpt,
) -> None:
    """Run the HTTP API: /search, /entries/{id}, /history/{repo}/{family}, /list, /stale,
    /healthz."""
    from kbase.serve.http_app import run
    from kbase.serve.mcp_early import log_to_stderr

    log_to_stderr(log_level)
    run(
        root=find_root(root),
        host=host,
        port=port,
        index_if_missing=not no_index,
        log_level=log_level,
        allow_write=allow_write,
    )


def export(
    dest: Path = typer.Argument(..., help="folder to write the skill folders into"),
    fmt: str = typer.Option("agent-skills", "--format", help="only agent-skills for now"),
    target: str = typer.Option("claude", help="claude or codex (codex adds agents/openai.yaml)"),
    include_all: bool = typer.Option(
        False, "--all", help="also export every skill, not only the router"
    ),
    mcp_url: str | None = typer.Option(None, help="a shared kbase MCP endpoint to name"),
    portable: bool = typer.Option(
        False, "--portable", help="router names no root and lists no skills (plugin copy)"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Export skills as Agent-Skills folders (a router skill; every skill with --all)."""
    if fmt != "agent-skills":
        raise fail(f"--format must be agent-skills, got {fmt!r}")
    rep = kb(root).export(
        dest, target=target, include_all=include_all, mcp_url=mcp_url, portable=portable
    )
    if as_json:
        print_json(rep.as_dict())
        return
    console.print(
        f"exported {len(rep.skills)} skill folder(s), {len(rep.files)} file(s) to {rep.dest}",
        highlight=False,
    )
    for s in rep.skipped:
        console.print(f"skipped {s}", highlight=False)


COMMANDS = (mcp, serve, export)
