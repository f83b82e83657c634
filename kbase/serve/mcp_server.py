"""`kbase mcp`: the knowledge base as an MCP server (mcp SDK v2, `MCPServer`), with the tools of
kbase/serve/mcp_tools.py, and the resources (`kbase://skill/{name}`, `kbase://tags`,
`kbase://glossary`) and the `triage-error` prompt (docs/agents.md) of register_extras below.
Arguments are checked (and forgiving aliases such as `question` -> `query` applied) by a server
middleware before the SDK's own validation, so a wrong guess gets a useful message."""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Any

from kbase.data import read_yaml
from kbase.envspec import parse_env
from kbase.errors import InvalidArgument, KbaseError
from kbase.schema import SearchQuery
from kbase.search_query import check_int, check_slug, opt_str
from kbase.serve import params as P
from kbase.serve.paging import DEFAULT_LIST_LIMIT, MAX_LIST_LIMIT
from kbase.serve.service import Service

log = logging.getLogger("kbase.serve.mcp")
# Each open session holds ~40 KB and the SDK's defaults keep 10,000 of them for 30 minutes
# (8,000 initializes grew the server by 317 MB); agents open one per conversation.
MAX_SESSIONS = 256
SESSION_IDLE_S = 600.0

INSTRUCTIONS = """\
kbase is a verified knowledge base of GPU-kernel engineering experience (CUDA, Triton, CUTLASS, \
PyTorch kernels): skills with a runnable check of their claim, and mined pull requests of kernel \
repos.
Use it when you write, debug, tune or review GPU kernels: `search` with the literal error line \
plus your root-cause hypothesis (not only the library or API name), read the one-line \
`candidates` and pick by your own reading, then `get` it (or just the section the hit names) \
before acting. `no_good_match: true` means kbase most likely has nothing for this: do not force it.
Each hit has a status: prefer `verified`; treat `failing`, `stale-*` and `draft` as leads to \
double-check. `history` shows how a kernel family evolved in one repo, \
newest first; `list` shows what exists; `stale` lists skills whose check fails or is out of date. \
Pass `env` (e.g. 'torch=2.8,arch=sm90' or 'local') to judge statuses for a machine.
Do not use it for general Python/C++ questions, for this project's own source (read the files), or \
as a source of truth over a failing test in front of you."""
WRITE_NOTE = """
Writes are on: after acting on an entry, `feedback` says how it went; when kbase had nothing and \
you found the fix, `propose` a draft skill (a person reviews it before it can be verified)."""


def _checked(tool: str, raw: dict[str, Any]) -> dict[str, Any]:
    """Aliases applied and every value checked; what the tool function will receive."""
    a = P.apply_aliases(tool, raw)
    if "env" in a:
        parse_env(a["env"])  # checked here, parsed again by the tool
    if "max_chars" in a:
        a["max_chars"] = check_int(
            "max_chars", a["max_chars"], P.MIN_MAX_CHARS, P.MAX_MAX_CHARS, P.DEFAULT_MAX_CHARS
        )
    if tool == "search":
        extra: dict[str, Any] = {k: a.pop(k) for k in ("max_chars", "env") if k in a}
        out = SearchQuery.parse(**a).model_dump(exclude={"mode", "env"}, exclude_defaults=True)
        return {**out, **extra}
    if tool in ("get", "feedback") and "id" in a:
        a["id"] = P.check_id(a["id"])
    if tool == "get" and "section" in a:
        a["section"] = P.check_section(a["section"])
    if tool == "history":
        a.update({k: check_slug(k, a.get(k), required=True) for k in ("repo", "family")})
    if tool == "list":  # each wrong type or value named (issue #27: pydantic's raw errors)
        a.update({k: opt_str(k, a[k]) for k in ("kind", "status", "tag", "cursor") if k in a})
        if a.get("kind") is not None:  # the checks and aliases search has: skills, prs, ...
            a["kind"] = SearchQuery.parse(query="x", kind=a["kind"]).kind
        if a.get("status") is not None:
            SearchQuery.parse(query="x", status=[a["status"]])
        if "limit" in a:
            a["limit"] = check_int("limit", a["limit"], 1, MAX_LIST_LIMIT, DEFAULT_LIST_LIMIT)
    return a


async def _arguments_middleware(ctx, call_next):
    """Rewrite tools/call arguments before the SDK validates them, or refuse them clearly."""
    name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
    if ctx.method == "tools/call" and name in P.TOOL_ARGS:
        try:
            args = _checked(name, ctx.params.get("arguments") or {})
        except ValueError as exc:  # InvalidArgument, or a check's own ValueError
            from mcp.types import CallToolResult, TextContent

            log.info("refused %s arguments: %s", name, exc)
            text = TextContent(type="text", text=f"invalid arguments for {name}: {exc}")
            return CallToolResult(content=[text], is_error=True)
        ctx = dataclasses.replace(ctx, params={**ctx.params, "arguments": args})
    return await call_next(ctx)


def build_server(service: Service, allow_write: bool = False):
    """An MCPServer bound to an already prepared Service (index present, model loaded)."""
    from mcp.server.mcpserver import MCPServer

    import kbase
    from kbase.serve.mcp_tools import register_tools

    srv = MCPServer(
        "kbase",
        title="kbase: GPU-kernel knowledge base",
        instructions=INSTRUCTIONS + (WRITE_NOTE if allow_write else " Everything is read-only."),
        version=getattr(kbase, "__version__", "0"),
        middleware=[_arguments_middleware],
        log_level="WARNING",
    )
    register_tools(srv, service, allow_write=allow_write)
    register_extras(srv, service)
    return srv


def tag_vocabulary(kb: Any) -> dict[str, Any]:
    from kbase.closed_sets import vocabulary
    from kbase.search_query import ARCHIVE_TAG_KEYS

    archive: dict[str, list[str]] = {k: [] for k in ARCHIVE_TAG_KEYS}
    for t in sorted(kb.archive_tags()):
        key, _, value = t.partition("=")
        archive[key].append(value)
    return {
        "usage": "search tags=['key=value', ...]; all must hold; aliases map to canonical values",
        "keys": {
            k: {"values": spec["values"], "aliases": spec["aliases"]}
            for k, spec in vocabulary().items()
        },
        "archive_keys": archive,
    }


def register_extras(srv: Any, service: Any) -> None:
    from mcp.server.mcpserver.exceptions import ResourceError

    kb = service.kb

    @srv.resource(
        "kbase://skill/{name}",
        name="skill",
        title="A kbase skill (SKILL.md)",
        description="The SKILL.md of one skill, front-matter included, as its authors wrote it",
        mime_type="text/markdown",
    )
    def skill(name: str) -> str:
        try:
            doc = kb.get(P.check_id(name))
        except KbaseError as exc:
            raise ResourceError(str(exc)) from None
        if doc.kind != "skill":
            raise ResourceError(f"{name!r} is not a skill; read PR cards with the get tool")
        return (kb.root / doc.path).read_text(encoding="utf-8")

    for name, title, description, data in (
        ("tags", "Tag vocabulary", "Tag keys, canonical values and aliases for search filters",
         lambda: tag_vocabulary(kb)),
        ("glossary", "Glossary (English / Chinese)",
         "GPU-kernel terms with Chinese equivalents and aliases, as search expands them",
         lambda: read_yaml("glossary.yaml")),
    ):  # fmt: skip
        srv.resource(
            f"kbase://{name}",
            name=name,
            title=title,
            description=description,
            mime_type="application/json",
        )(_as_json(data))

    @srv.prompt(
        name="triage-error",
        title="Triage a GPU-kernel error",
        description="From an error message or symptom to a fix backed by a kbase entry",
    )
    def triage_error(error: str, context: str = "") -> str:
        where = f"\n\nContext: {context.strip()}" if context.strip() else ""
        return (
            "A GPU kernel fails with this error or symptom:\n\n"
            f"```text\n{error.strip()[:4000]}\n```{where}\n\n"
            "1. Call the kbase `search` tool with the literal error line plus your root-cause "
            "hypothesis (k=5); read its one-line `candidates` and pick by your own reading. "
            "`no_good_match: true` means kbase most likely has nothing for this.\n"
            "2. `get` the best hit, or the section its `more` names. Prefer `verified` entries; "
            "treat `failing`, `stale-*` and `draft` ones as leads to check.\n"
            "3. Explain the likely cause, then the fix, citing the entry id. If no entry fits, say "
            "so and reason from the error itself.\n"
            "4. Once the fix works, record it: `feedback` on the entry you used, or `propose` a "
            "draft if kbase had nothing (when the server allows writes)."
        )


def _as_json(data: Any) -> Any:
    def read() -> str:
        return json.dumps(data(), ensure_ascii=False)

    return read


def run(
    root=None,
    home=None,
    http: str | None = None,
    index_if_missing: bool = True,
    allow_write: bool = False,
    early=None,
) -> None:
    """Prepare the service (stdout kept clean for the protocol), then serve stdio or HTTP.
    `early`: the EarlyAnswers (kbase/serve/mcp_early.py) started before this module's imports."""
    import anyio

    if not http and early is None:
        from kbase.serve.mcp_early import EarlyAnswers

        early = EarlyAnswers(allow_write=allow_write)
    from kbase.api import KnowledgeBase

    service = Service(KnowledgeBase(root=root, home=home))
    srv = build_server(service, allow_write=allow_write)
    # The index is built on a thread while the protocol runs (issue #27); started after the
    # server's imports: the thread would hold the GIL they need.
    service.start(index_if_missing=index_if_missing)
    if http:
        anyio.run(serve_http, srv, *parse_hostport(http))
    else:
        anyio.run(run_stdio, srv, early)
    service.finish()


async def serve_http(srv, host: str, port: int) -> None:
    """Streamable HTTP behind the same transport guard as `kbase serve` (kbase/serve/guard.py),
    with bounded sessions: past MAX_SESSIONS a new one gets 503, and a session with no request
    for SESSION_IDLE_S seconds is closed (its id then gets 404)."""
    import uvicorn

    from kbase.serve.guard import Guard, allowed_hosts, guarded_protocol

    sdk = srv.streamable_http_app(
        host=host, max_sessions=MAX_SESSIONS, session_idle_timeout=SESSION_IDLE_S
    )
    app = Guard(sdk, allowed_hosts(host), check_json=False)
    config = uvicorn.Config(
        app, host=host, port=port, log_level="warning", http=guarded_protocol(), server_header=False
    )
    await uvicorn.Server(config).serve()


def _rejection(exc: Exception):
    """A JSON-RPC error for a line the transport could not read as a message. The SDK drops
    such lines silently, which leaves a client waiting forever on a request it got slightly
    wrong; answering -32700/-32600 (with the id when we can find it) does not."""
    from mcp.shared.message import SessionMessage
    from mcp.types import ErrorData, JSONRPCError

    errors = exc.errors() if hasattr(exc, "errors") else []
    ids = [e["input"].get("id") for e in errors if isinstance(e.get("input"), dict)]
    rid = next((i for i in ids if isinstance(i, (int, str)) and not isinstance(i, bool)), None)
    err = ErrorData(code=-32700, message="parse error: each line must be one JSON-RPC message")
    if errors and not any(e.get("type") == "json_invalid" for e in errors):
        text = "invalid request: not a JSON-RPC 2.0 request, notification or response"
        err = ErrorData(code=-32600, message=text)
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=rid, error=err))


def _no_null_ids(line: str) -> str:
    """A request whose id is null, boolean or fractional, as a line the SDK refuses. The SDK
    reads `{"id": null, "method": ...}` as a notification (it ignores the id) and never answers,
    so the client waits forever; made invalid here, it gets -32600 like any bad line."""
    if '"id"' not in line:
        return line
    try:
        msg = json.loads(line)
    except ValueError:
        return line
    if isinstance(msg, dict) and "id" in msg and "method" in msg:
        rid = msg["id"]
        if rid is None or isinstance(rid, (bool, float)):
            return '{"jsonrpc": "2.0", "id": null, "kbase": "an id must be a string or integer"}\n'
    return line


async def _lines(early) -> Any:
    """The client's lines as EarlyAnswers read them, through _no_null_ids."""
    import anyio

    while line := await anyio.to_thread.run_sync(early.lines.get, abandon_on_cancel=True):
        yield _no_null_ids(line)


def _already_answered(item: Any, answered: dict[str, dict]) -> bool:
    """Whether `item` is the SDK's answer to a request EarlyAnswers answered (it is dropped);
    one that differs from the recorded answer is logged: the recording is stale."""
    msg = item.message
    key = json.dumps(getattr(msg, "id", None))
    if key not in answered or not (hasattr(msg, "result") or hasattr(msg, "error")):
        return False
    sent = answered.pop(key)
    if getattr(msg, "result", None) != sent:
        fix = "re-record with python bench/mcp_record.py"
        log.warning("request %s was answered early, and the SDK answers otherwise: %s", key, fix)
    return True


async def run_stdio(srv, early) -> None:
    """The SDK's stdio loop over the lines EarlyAnswers read, with unreadable lines answered
    instead of dropped, and the SDK's answers to requests answered early dropped."""
    import anyio
    from mcp.server.stdio import stdio_server

    low = srv._lowlevel_server  # what MCPServer.run_stdio_async drives too
    wire = anyio.wrap_file(open(early.wire_out, "w", encoding="utf-8", closefd=False))  # noqa: SIM115
    answered = early.hand_over()
    fwd_send, fwd_recv = anyio.create_memory_object_stream[Any](16)
    out_send, out_recv = anyio.create_memory_object_stream[Any](16)
    try:
        async with stdio_server(stdin=_lines(early), stdout=wire) as (read_stream, write_stream):

            async def pump() -> None:
                async with fwd_send:
                    async for item in read_stream:
                        if isinstance(item, Exception):
                            log.info("unreadable JSON-RPC line: %s", type(item).__name__)
                            await write_stream.send(_rejection(item))
                        else:
                            await fwd_send.send(item)

            async def answers() -> None:
                async with out_recv, write_stream:  # low.run closes out_send when it ends
                    async for item in out_recv:
                        if not _already_answered(item, answered):
                            await write_stream.send(item)

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump)
                tg.start_soon(answers)
                await low.run(fwd_recv, out_send, low.create_initialization_options())
                tg.cancel_scope.cancel()
    except* (BrokenPipeError, anyio.BrokenResourceError):
        # The client closed its end of our stdout (it went away mid-call): the SDK's writer
        # fails, then every task that hands it an answer. Nothing more can reach the client,
        # so the server stops as it does at end of input (exit 0, no traceback).
        log.info("the client closed the connection: stopping")
    finally:
        # An abandoned worker thread may still wait for a line that will never come, and the
        # interpreter joins it at exit: end of input releases it.
        early.lines.put(None)


def parse_hostport(value: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    host, _, port = value.rpartition(":")  # no ":": host is "", port is all of it
    host = host.strip("[]") or default_host
    try:
        p = int(port)
    except ValueError:
        raise InvalidArgument(f"expected HOST:PORT, got {value!r}") from None
    if not 0 < p < 65536:
        raise InvalidArgument(f"port must be 1..65535, got {p}")
    return host, p
