"""`kbase mcp`: the knowledge base as an MCP server (mcp SDK v2, `MCPServer`).

Four read-only tools: search, get, history, stale. Every tool answers with one JSON text
block whose size is capped by `max_chars`, because agent context is the scarce resource.
Arguments are checked (and forgiving aliases such as `question` -> `query` applied) by a
server middleware before the SDK's own validation, so a wrong guess gets a useful message.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kbase.errors import KbaseError
from kbase.schema import SearchQuery
from kbase.serve import params as P
from kbase.serve.service import (
    Service,
    compact_hit,
    fit_entry,
    fit_hits,
    fit_list,
)

log = logging.getLogger("kbase.serve.mcp")

INSTRUCTIONS = """\
kbase is a verified knowledge base of GPU-kernel engineering experience (CUDA, Triton, CUTLASS, \
PyTorch kernels): skills with a runnable check of their claim, and mined pull requests of kernel repos.
Use it when you write, debug, tune or review GPU kernels: paste the symptom or the literal error \
message into `search`, then `get` the best hit (or just the section the hit names) before acting.
Each hit has a status: prefer `verified`; treat `failing` and `stale-*` as leads to double-check. \
`history` shows how a kernel family evolved in one repo; `stale` lists skills whose check fails or is out of date.
Do not use it for general Python/C++ questions, for this project's own source (read the files), or \
as a source of truth over a failing test in front of you. Everything is read-only."""

DEFAULT_GET_CHARS = 20_000


def _checked(tool: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Aliases applied and every value checked; what the tool function will receive."""
    a = P.apply_aliases(tool, raw)
    if tool == "search":
        query, max_chars = P.search_args(a)
        # agents get hybrid search; the mode knob is for benchmarks
        out = query.model_dump(exclude={"mode", "env"})
        out["max_chars"] = max_chars
        return out
    if tool == "get":
        return {
            "id": P.check_id(a.get("id")),
            "section": P.check_section(a.get("section")),
            "max_chars": P.check_max_chars(a.get("max_chars"), DEFAULT_GET_CHARS),
        }
    if tool == "history":
        return {
            "repo": P.check_slug("repo", a.get("repo"), required=True),
            "family": P.check_slug("family", a.get("family"), required=True),
            "max_chars": P.check_max_chars(a.get("max_chars")),
        }
    if tool == "stale":
        return {"max_chars": P.check_max_chars(a.get("max_chars"))}
    return raw


async def _arguments_middleware(ctx, call_next):
    """Rewrite tools/call arguments before the SDK validates them, or refuse them with a clear message."""
    if (
        ctx.method == "tools/call"
        and isinstance(ctx.params, dict)
        and ctx.params.get("name") in P.KNOWN_ARGS
    ):
        name = ctx.params["name"]
        try:
            args = _checked(name, ctx.params.get("arguments") or {})
        except P.ParamError as exc:
            from mcp.types import CallToolResult, TextContent

            log.info("refused %s arguments: %s", name, exc)
            return CallToolResult(
                content=[TextContent(type="text", text=f"invalid arguments for {name}: {exc}")],
                is_error=True,
            )
        ctx = dataclasses.replace(ctx, params={**ctx.params, "arguments": args})
    return await call_next(ctx)


def build_server(service: Service):
    """An MCPServer bound to an already prepared Service (index present, model loaded)."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import ToolAnnotations

    import kbase

    srv = MCPServer(
        "kbase",
        title="kbase: GPU-kernel knowledge base",
        instructions=INSTRUCTIONS,
        version=getattr(kbase, "__version__", "0"),
        middleware=[_arguments_middleware],
        log_level="WARNING",
    )
    ro = dict(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)

    def _run(fn, *a, **kw):
        try:
            return fn(*a, **kw)
        except KbaseError as exc:
            raise ToolError(str(exc)) from None

    @srv.tool(annotations=ToolAnnotations(title="Search kbase", **ro), structured_output=False)
    def search(
        query: str,
        k: int = P.DEFAULT_K,
        kind: str | None = None,
        repo: str | None = None,
        tags: list[str] | None = None,
        status: list[str] | None = None,
        since: str | None = None,
        until: str | None = None,
        max_chars: int = P.DEFAULT_MAX_CHARS,
    ) -> str:
        """Find skills and PR cards for a symptom, error message or topic; compact hits, then use get."""
        q = _run(
            SearchQuery.parse,
            query=query,
            k=k,
            kind=kind,
            repo=repo,
            tags=tags,
            status=status,
            since=since,
            until=until,
        )
        result = _run(service.search, q)
        return fit_hits(result.query, [compact_hit(h) for h in result.hits], max_chars)

    @srv.tool(
        annotations=ToolAnnotations(title="Read a kbase entry", **ro), structured_output=False
    )
    def get(id: str, section: str | None = None, max_chars: int = DEFAULT_GET_CHARS) -> str:  # noqa: A002
        """Read one entry in full (skill name or pr:<repo>#<N>), or only one section of it."""
        return fit_entry(_run(service.get, id, section), max_chars)

    @srv.tool(
        annotations=ToolAnnotations(title="Kernel family history", **ro), structured_output=False
    )
    def history(repo: str, family: str, max_chars: int = P.DEFAULT_MAX_CHARS) -> str:
        """Timeline of the archived PRs of one kernel family in one repo (e.g. repo=flashinfer, family=attention)."""
        return fit_list(_run(service.history, repo, family), "prs", max_chars)

    @srv.tool(
        annotations=ToolAnnotations(title="Failing or stale skills", **ro), structured_output=False
    )
    def stale(max_chars: int = P.DEFAULT_MAX_CHARS) -> str:
        """Skills whose verification fails or is out of date, worst first, with the reasons."""
        return fit_list(_run(service.stale), "skills", max_chars)

    return srv


def run(root=None, home=None, http: str | None = None, index_if_missing: bool = True) -> None:
    """Prepare the service (stdout kept clean for the protocol), then serve stdio or streamable HTTP."""
    import anyio

    from kbase.serve.service import stdout_to_stderr

    with stdout_to_stderr():
        service = Service.open(root=root, home=home, index_if_missing=index_if_missing)
        srv = build_server(service)
    if http:
        host, port = parse_hostport(http)
        anyio.run(lambda: srv.run_streamable_http_async(host=host, port=port))
    else:
        anyio.run(run_stdio, srv)


def _rejection(exc: Exception):
    """A JSON-RPC error for a line the transport could not read as a message.

    The SDK drops such lines silently, which leaves a client waiting forever on a request
    it got slightly wrong; answering -32700/-32600 (with the id when we can find it) does not.
    """
    from mcp.shared.message import SessionMessage
    from mcp.types import ErrorData, JSONRPCError

    rid = None
    errors = exc.errors() if hasattr(exc, "errors") else []
    for e in errors:
        inp = e.get("input")
        if (
            isinstance(inp, dict)
            and isinstance(inp.get("id"), (int, str))
            and not isinstance(inp.get("id"), bool)
        ):
            rid = inp["id"]
            break
    if any(e.get("type") == "json_invalid" for e in errors) or not errors:
        err = ErrorData(code=-32700, message="parse error: each line must be one JSON-RPC message")
    else:
        err = ErrorData(
            code=-32600,
            message="invalid request: not a JSON-RPC 2.0 request, notification or response",
        )
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid, error=err))


async def run_stdio(srv) -> None:
    """srv.run_stdio_async(), with unreadable lines answered instead of dropped."""
    import anyio
    from mcp.server.stdio import stdio_server

    low = srv._lowlevel_server  # what MCPServer.run_stdio_async drives too
    async with stdio_server() as (read_stream, write_stream):
        fwd_send, fwd_recv = anyio.create_memory_object_stream(16)

        async def pump() -> None:
            async with fwd_send:
                async for item in read_stream:
                    if isinstance(item, Exception):
                        log.info("unreadable JSON-RPC line: %s", type(item).__name__)
                        await write_stream.send(_rejection(item))
                        continue
                    await fwd_send.send(item)

        async with anyio.create_task_group() as tg:
            tg.start_soon(pump)
            await low.run(fwd_recv, write_stream, low.create_initialization_options())
            tg.cancel_scope.cancel()


def parse_hostport(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep:
        host, port = default_host, value
    host = host.strip("[]") or default_host
    try:
        p = int(port)
    except ValueError:
        raise P.ParamError(f"expected HOST:PORT, got {value!r}") from None
    if not 0 < p < 65536:
        raise P.ParamError(f"port must be 1..65535, got {p}")
    return host, p
