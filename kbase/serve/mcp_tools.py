"""The MCP tools (docs/agents.md): every parameter typed, bounded and described in its input
schema, every answer a model (its output schema) sent as structured content and as JSON text.
Write tools exist only with `--allow-write`, annotated as writes and rate-limited."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from kbase import schema as S
from kbase.closed_sets import ENTRY_STATUSES, EntryStatus, FeedbackVerdict
from kbase.envspec import ENV_HELP, parse_env
from kbase.errors import KbaseError
from kbase.feedback import MAX_NOTE_CHARS, VERDICTS
from kbase.search_query import DEFAULT_K, MAX_K, MAX_QUERY_CHARS, MAX_TAGS
from kbase.serve import mcp_answers as A
from kbase.serve import paging as PG
from kbase.serve import params as P
from kbase.serve.service import RateLimit

DEFAULT_GET_CHARS = 20_000


def _len(max_length: int, description: str, min_length: int | None = 1) -> Any:
    """A length-bounded, described parameter (`min_length` None: no lower bound)."""
    return Field(min_length=min_length, max_length=max_length, description=description)


BUDGET_HELP = (
    "the most characters the JSON answer may take; longer answers are cut and say so in `truncated`"
)
Budget = Annotated[int, Field(ge=P.MIN_MAX_CHARS, le=P.MAX_MAX_CHARS, description=BUDGET_HELP)]
Env = Annotated[str | None, Field(description=ENV_HELP, max_length=200)]
Day = Annotated[str | None, Field(description="YYYY-MM-DD, inclusive", pattern=P.DAY_PATTERN)]
Cursor = Annotated[str | None, _len(100, "next_cursor of the previous page", None)]
QUERY_HELP = (
    "the literal error line plus your root-cause hypothesis in a few words (what you think is "
    "wrong), not only the library or API name"
)
TAGS_HELP = (
    "key=value filters that must all hold. Keys: languages, kernel_types, archs, techniques "
    "(values: resource kbase://tags; aliases such as archs=hopper work) and, for PR cards, "
    "family, category, repo. Example: ['archs=sm90', 'languages=triton']"
)
SECTION_HELP = (
    "only this section: a heading title (see `sections` of a whole answer), or trigger, steps, "
    "failure_modes"
)
SNIPPET_HELP = (
    "optional Python check that exits 0 when the fix holds (runs later, in the sandbox, after "
    "review)"
)
VERDICT_HELP = "; ".join(f"{v}: {why}" for v, (_, why) in VERDICTS.items())


def _result(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """Structured content checked against the tool's output model, and the same JSON as text."""
    from mcp.types import CallToolResult, TextContent

    clean = model.model_validate(data).model_dump(mode="json", exclude_none=True)
    return CallToolResult(
        content=[TextContent(type="text", text=A.dumps(clean))], structured_content=clean
    )


def compact_hit(h: Any) -> dict[str, Any]:
    more: dict[str, Any] = {"tool": "get", "id": h.id}
    # "summary" is built from the front-matter, not a section get() returns: read it whole then
    if h.section and h.section != "summary":
        more["section"] = h.section
    out = h.model_dump(mode="json", include=set(A.CompactHit.model_fields))
    return {**out, "where": f"{h.path}:{h.line}" if h.line else h.path, "more": more}


RO = dict(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
RW = dict(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)


def run(fn: Any, *a: Any, **kw: Any) -> Any:
    """Calls a function, its KbaseError turned into the tool error the client reads."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn(*a, **kw)
    except KbaseError as exc:
        raise ToolError(str(exc)) from None


def register_tools(srv: Any, service: Any, allow_write: bool = False) -> None:
    _search_tool(srv, service)
    _read_tools(srv, service)
    if allow_write:
        _write_tools(srv, service, RateLimit())


def _search_tool(srv: Any, service: Any) -> None:
    @srv.tool(annotations=ToolAnnotations(title="Search kbase", **RO))
    def search(
        query: Annotated[str, _len(MAX_QUERY_CHARS, QUERY_HELP)],
        k: Annotated[int, Field(ge=1, le=MAX_K, description="number of hits")] = DEFAULT_K,
        kind: Annotated[
            Literal["skill", "pr"] | None,
            Field(description="only skills (verified know-how) or only PR cards (mined history)"),
        ] = None,
        repo: Annotated[str | None, _len(100, "only PR cards of this archived repo", None)] = None,
        tags: Annotated[list[str], Field(description=TAGS_HELP, max_length=MAX_TAGS)] = [],  # noqa: B006
        status: Annotated[
            list[EntryStatus],
            _len(len(ENTRY_STATUSES), "only entries with one of these statuses", None),
        ] = [],  # noqa: B006
        since: Day = None,
        until: Day = None,
        env: Env = None,
        max_chars: Budget = P.DEFAULT_MAX_CHARS,
    ) -> A.SearchAnswer:
        """Find skills and PR cards for a failure. Search with the literal error line plus your
        root-cause hypothesis, not only an API name. Hits carry a status, a `confidence` and the
        `get` call that reads more; `candidates` lists a dozen or so entries in one line each to
        pick from; `no_good_match: true` means kbase most likely has nothing for this."""
        e = run(parse_env, env)
        filters = dict(kind=kind, repo=repo, tags=tags, status=status, since=since, until=until)
        result = run(service.search, run(S.SearchQuery.parse, query=query, k=k, env=e, **filters))
        data: dict[str, Any] = {
            "query": result.query,
            "env": e,
            "no_good_match": result.no_good_match,
            "hits": [compact_hit(h) for h in result.hits],
            "candidates": [c.model_dump(mode="json") for c in result.candidates],
        }
        if not result.hits:
            data["note"] = (
                "no hits: try the literal error text, fewer words, or fewer filters"
                if any(filters.values())
                else "no hits: try the literal error text or fewer words; `list` shows what exists"
            )
        return _result(A.SearchAnswer, A.fit_search(data, max_chars))


def _read_tools(srv: Any, service: Any) -> None:
    kb = service.kb

    @srv.tool(annotations=ToolAnnotations(title="Read a kbase entry", **RO))
    def get(
        id: Annotated[  # noqa: A002
            str, _len(120, "a skill name (e.g. gpu-kernel-timing) or pr:<repo>#<N>, from search")
        ],
        section: Annotated[str | None, _len(120, SECTION_HELP, None)] = None,
        env: Env = None,
        max_chars: Budget = DEFAULT_GET_CHARS,
    ) -> A.EntryAnswer:
        """Read one entry in full, or one section of it, with its status and users' feedback."""
        doc = run(kb.get, id, section, env=run(parse_env, env))  # checked by the middleware
        d = doc.model_dump(mode="json")
        d["sections"] = [s.title for s in doc.sections]
        if not d.get("text"):
            d["text"] = doc.title  # an entry with no body still says what it is
        return _result(A.EntryAnswer, A.fit_entry(d, max_chars))

    @srv.tool(annotations=ToolAnnotations(title="Kernel family history", **RO))
    def history(
        repo: Annotated[str, _len(100, "an archived repo, e.g. flashinfer")],
        family: Annotated[str, _len(100, "a kernel family of that repo, e.g. attention")],
        since: Day = None,
        until: Day = None,
        limit: Annotated[
            int, Field(ge=1, le=PG.MAX_HISTORY_LIMIT, description="PRs per page")
        ] = PG.DEFAULT_HISTORY_LIMIT,
        cursor: Cursor = None,
        max_chars: Budget = P.DEFAULT_MAX_CHARS,
    ) -> S.HistoryPage:
        """The PRs that changed one kernel family in one archived repo, newest first, a page
        at a time (follow next_cursor for older ones)."""
        res = run(kb.history, repo, family)  # names checked by the middleware (mcp_server)
        data = run(PG.page_history, res, since, until, limit, cursor)  # the cursor is checked here
        return _result(S.HistoryPage, A.fit_items(data, "prs", max_chars, PG.decode_cursor(cursor)))

    @srv.tool(annotations=ToolAnnotations(title="List kbase entries", **RO))
    def list(  # noqa: A001
        kind: Annotated[
            Literal["skill", "pr"] | None, Field(description="only skills or only PR cards")
        ] = None,
        status: Annotated[
            EntryStatus | None, Field(description="only entries with this status")
        ] = None,
        tag: Annotated[str | None, _len(100, "only entries with this key=value tag", None)] = None,
        limit: Annotated[
            int, Field(ge=1, le=PG.MAX_LIST_LIMIT, description="entries per page")
        ] = PG.DEFAULT_LIST_LIMIT,
        cursor: Cursor = None,
        max_chars: Budget = P.DEFAULT_MAX_CHARS,
    ) -> S.ListPage:
        """What the knowledge base holds: entries by kind, status and tag, with counts."""
        data = run(PG.page_list, run(kb.list_entries, kind), status, tag, limit, cursor)
        counts = data["counts"]
        if len(A.dumps(data)) > max_chars and len(counts["tags"]) > 40:
            top = sorted(counts["tags"].items(), key=lambda kv: -kv[1])[:40]
            counts["tags"] = dict(top)  # the long tail of PR tags goes first
        offset = PG.decode_cursor(cursor)  # checked by page_list
        return _result(S.ListPage, A.fit_items(data, "entries", max_chars, offset))

    @srv.tool(annotations=ToolAnnotations(title="Failing or stale skills", **RO))
    def stale(env: Env = None, max_chars: Budget = P.DEFAULT_MAX_CHARS) -> S.StaleAnswer:
        """Skills whose verification fails or is out of date (for `env`), worst first, with why."""
        data = run(kb.stale, run(parse_env, env)).model_dump(mode="json")
        return _result(S.StaleAnswer, A.fit_items(data, "skills", max_chars))


def _write_tools(srv: Any, service: Any, writes: RateLimit) -> None:
    kb = service.kb

    @srv.tool(annotations=ToolAnnotations(title="Record feedback on an entry", **RW))
    def feedback(
        id: Annotated[str, _len(120, "the entry you acted on")],  # noqa: A002
        verdict: Annotated[FeedbackVerdict, Field(description=VERDICT_HELP)],
        note: Annotated[
            str, _len(MAX_NOTE_CHARS, "what happened, in a sentence or two", None)
        ] = "",
    ) -> S.FeedbackAnswer:
        """Say how acting on an entry went. Appended to a log, shown with the entry, and a mild
        ranking signal; it never changes a verification status."""
        run(writes.take)
        return _result(S.FeedbackAnswer, run(kb.feedback, id, verdict, note, "mcp"))

    @srv.tool(annotations=ToolAnnotations(title="Propose a draft skill", **RW))
    def propose(
        title: Annotated[str, _len(120, "one line: the problem")],
        symptom: Annotated[str, _len(2000, "the symptom or the literal error text")],
        cause: Annotated[str, _len(2000, "why it happened")],
        fix: Annotated[str, _len(2000, "what fixed it")],
        snippet: Annotated[str | None, _len(20_000, SNIPPET_HELP, None)] = None,
    ) -> S.ProposeAnswer:
        """Turn what you just learned into a draft skill under skills/_drafts/: searchable with
        status draft, and verified only after a person reviews it and its check passes."""
        run(writes.take)
        return _result(S.ProposeAnswer, run(kb.propose, title, symptom, cause, fix, snippet))
