"""The MCP tools (docs/agents.md): every parameter typed, bounded and described in its input
schema, every answer a model (its output schema) sent as structured content and as JSON text.
Write tools exist only with `--allow-write`, annotated as writes and rate-limited.
Search and get answer the compact models here, history, list and stale kbase.schema's pages.
Agent context is the scarce resource, so every answer's JSON stays within the call's `max_chars`;
what a cut leaves out is said in `truncated` (lists get a `next_cursor`, an entry's text is cut,
never emptied)."""

from __future__ import annotations

import json
from itertools import accumulate
from typing import Annotated, Any, Literal

from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from kbase import schema as S
from kbase.closed_sets import ENTRY_STATUSES, EntryStatus, FeedbackVerdict
from kbase.envspec import ENV_HELP, parse_env
from kbase.errors import KbaseError
from kbase.feedback import MAX_NOTE_CHARS, VERDICTS
from kbase.search_query import DEFAULT_K, MAX_K, MAX_QUERY_CHARS, MAX_TAGS
from kbase.serve import paging as PG
from kbase.serve import params as P
from kbase.serve.service import RateLimit

MIN_TEXT_CHARS = 80  # an entry answer always carries at least this much of the text
DEFAULT_GET_CHARS = 20_000


def dumps(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), default=str)


class More(BaseModel):
    tool: Literal["get"] = "get"
    id: str
    section: str | None = None


class CompactHit(S.Verified):
    section: str = Field(description="the section the snippet comes from")
    snippet: str
    where: str = Field(description="path:line in the knowledge base")
    more: More = Field(description="the get call that reads the rest")
    confidence: float | None = Field(None, description="estimated probability that it fits")


class SearchAnswer(BaseModel):
    query: str
    env: str | dict[str, str] | None = Field(None, description="environment statuses are for")
    no_good_match: bool = Field(
        False, description="true: even the best hit is unlikely to fit; the kb may not cover this"
    )
    hits: list[CompactHit]
    candidates: list[S.SearchCandidate] = Field(
        default_factory=list,
        description="the top 13 entries, one line each (use_when, matched trigger): pick one",
    )
    note: str | None = Field(None, description="why there are no hits, and what to try")
    truncated: S.Truncation | None = None


class EntryAnswer(S.Verified):
    path: str | None = Field(
        None, description="file in the knowledge base (dropped first on a tight budget)"
    )
    tags: list[str] = Field(default_factory=list)
    sections: list[str] = Field(default_factory=list, description="section titles get accepts")
    text: str = Field(description="the entry (or the asked section); never empty")
    feedback: dict[str, Any] | None = Field(None, description="what users said after acting on it")
    truncated: S.Truncation | None = None


def _cut(s: str, width: int | None) -> str:
    return s if width is None or len(s) <= width else s[:width].rstrip() + "…"


def fit_search(answer: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """Shorten snippets first, then the candidate lines, then drop the lowest hits, then the
    last candidate lines."""
    hits = answer["hits"]
    out = dict(answer)
    if len(out["query"]) > 120:
        out["query"] = out["query"][:120] + "…"
    cands = out.get("candidates") or []
    for width in (None, 160, 80):
        out["hits"] = [dict(h, snippet=_cut(h["snippet"], width)) for h in hits]
        if len(dumps(out)) <= max_chars:
            return out
    for w in (100, 60):  # candidate lines next: the caller still sees every id
        out["candidates"] = [
            dict(c, use_when=_cut(c["use_when"], w), trigger=_cut(c.get("trigger") or "", w))
            for c in cands
        ]
        if len(dumps(out)) <= max_chars:
            return out
    out = fit_items(out, "hits", max_chars)  # the lowest hits go, then the candidate lines
    while len(dumps(out)) > max_chars and out["candidates"]:
        out["candidates"] = out["candidates"][:-1]
    return out


def fit_entry(doc: dict[str, Any], max_chars: int) -> dict[str, Any]:
    """The text cut at the budget, never to nothing: tags and the section list go first."""
    text = doc.get("text") or ""
    out = dict(doc)
    if len(dumps(out)) <= max_chars:
        return out
    last = ("verified_on", "verified_at", "repo")
    hint = "ask for a section or raise max_chars"
    for drop in accumulate([(), ("tags",), ("sections",), ("feedback", "path"), last]):  # more each
        head = {k: v for k, v in out.items() if k not in drop}
        head["text"] = ""
        head["truncated"] = {"shown_chars": len(text), "total_chars": len(text), "hint": hint}
        room = max_chars - len(dumps(head))
        if room >= MIN_TEXT_CHARS:
            break
    if room < MIN_TEXT_CHARS:  # a tiny budget: shorten the envelope, never the text to nothing
        head["truncated"]["hint"] = "raise max_chars"  # the short form
        room = max_chars - len(dumps(head))
    if room < MIN_TEXT_CHARS and head.get("title"):
        title = head["title"]
        head["title"] = title[: max(16, len(title) - (MIN_TEXT_CHARS - room) - 1)].rstrip() + "…"
        room = max_chars - len(dumps(head))
    room -= len(dumps("…")) - 2  # the ellipsis appended below
    cut = text[: max(room, MIN_TEXT_CHARS)]
    while len(cut) > MIN_TEXT_CHARS and len(dumps(cut)) - 2 > room:
        cut = cut[: max(MIN_TEXT_CHARS, int(len(cut) * 0.9))]
    head["text"] = cut.rstrip() + "…"
    head["truncated"]["shown_chars"] = len(cut)
    return head


def fit_items(answer: dict[str, Any], key: str, max_chars: int, offset: int = 0) -> dict[str, Any]:
    """Drop items from the end until the JSON fits; with paging, next_cursor resumes at the cut."""
    items = list(answer.get(key) or [])
    paged = "next_cursor" in answer
    out = dict(answer)
    n = len(items)
    while True:
        out[key] = items[:n]
        if n < len(items):
            out["truncated"] = {
                "omitted": len(items) - n,
                "hint": "follow next_cursor" if paged else "raise max_chars",
            }
            if paged:
                out["next_cursor"] = str(offset + n)
        if len(dumps(out)) <= max_chars or n == 0:
            return out
        n = max(0, min(n - 1, int(n * max_chars / len(dumps(out)))))


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
PerPage = Annotated[int, Field(ge=1, le=PG.MAX_HISTORY_LIMIT, description="PRs per page")]
ListPerPage = Annotated[int, Field(ge=1, le=PG.MAX_LIST_LIMIT, description="entries per page")]
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
RO = dict(readOnlyHint=True, destructiveHint=False, idempotentHint=True, openWorldHint=False)
RW = dict(readOnlyHint=False, destructiveHint=False, idempotentHint=False, openWorldHint=False)


def _result(model: type[BaseModel], data: dict[str, Any]) -> Any:
    """Structured content checked against the tool's output model, and the same JSON as text."""
    from mcp.types import CallToolResult, TextContent

    clean = model.model_validate(data).model_dump(mode="json", exclude_none=True)
    text = TextContent(type="text", text=dumps(clean))
    return CallToolResult(content=[text], structured_content=clean)


def compact_hit(h: Any) -> dict[str, Any]:
    more: dict[str, Any] = {"tool": "get", "id": h.id}
    # "summary" is built from the front-matter, not a section get() returns: read it whole then
    if h.section and h.section != "summary":
        more["section"] = h.section
    out = h.model_dump(mode="json", include=set(CompactHit.model_fields))
    return {**out, "where": f"{h.path}:{h.line}" if h.line else h.path, "more": more}


def run(fn: Any, *a: Any, **kw: Any) -> Any:
    """Calls a function, its KbaseError turned into the tool error the client reads."""
    from mcp.server.mcpserver.exceptions import ToolError

    try:
        return fn(*a, **kw)
    except KbaseError as exc:
        raise ToolError(str(exc)) from None


def register_tools(srv: Any, service: Any, allow_write: bool = False) -> None:
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
    ) -> SearchAnswer:
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
        return _result(SearchAnswer, fit_search(data, max_chars))

    _read_tools(srv, service)
    if allow_write:
        _write_tools(srv, service, RateLimit())


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
    ) -> EntryAnswer:
        """Read one entry in full, or one section of it, with its status and users' feedback."""
        doc = run(kb.get, id, section, env=run(parse_env, env))  # checked by the middleware
        d = doc.model_dump(mode="json")
        d["sections"] = [s.title for s in doc.sections]
        if not d.get("text"):
            d["text"] = doc.title  # an entry with no body still says what it is
        return _result(EntryAnswer, fit_entry(d, max_chars))

    @srv.tool(annotations=ToolAnnotations(title="Kernel family history", **RO))
    def history(
        repo: Annotated[str, _len(100, "an archived repo, e.g. flashinfer")],
        family: Annotated[str, _len(100, "a kernel family of that repo, e.g. attention")],
        since: Day = None,
        until: Day = None,
        limit: PerPage = PG.DEFAULT_HISTORY_LIMIT,
        cursor: Cursor = None,
        max_chars: Budget = P.DEFAULT_MAX_CHARS,
    ) -> S.HistoryPage:
        """The PRs that changed one kernel family in one archived repo, newest first, a page
        at a time (follow next_cursor for older ones)."""
        res = run(kb.history, repo, family)  # names checked by the middleware (mcp_server)
        data = run(PG.page_history, res, since, until, limit, cursor)  # the cursor is checked here
        return _result(S.HistoryPage, fit_items(data, "prs", max_chars, PG.decode_cursor(cursor)))

    @srv.tool(annotations=ToolAnnotations(title="List kbase entries", **RO))
    def list(  # noqa: A001
        kind: Annotated[
            Literal["skill", "pr"] | None, Field(description="only skills or only PR cards")
        ] = None,
        status: Annotated[
            EntryStatus | None, Field(description="only entries with this status")
        ] = None,
        tag: Annotated[str | None, _len(100, "only entries with this key=value tag", None)] = None,
        limit: ListPerPage = PG.DEFAULT_LIST_LIMIT,
        cursor: Cursor = None,
        max_chars: Budget = P.DEFAULT_MAX_CHARS,
    ) -> S.ListPage:
        """What the knowledge base holds: entries by kind, status and tag, with counts."""
        data = run(PG.page_list, run(kb.list_entries, kind), status, tag, limit, cursor)
        counts = data["counts"]
        if len(dumps(data)) > max_chars and len(counts["tags"]) > 40:
            counts["tags"] = dict(counts["tags"].most_common(40))  # PR tags' long tail goes first
        return _result(S.ListPage, fit_items(data, "entries", max_chars, PG.decode_cursor(cursor)))

    @srv.tool(annotations=ToolAnnotations(title="Failing or stale skills", **RO))
    def stale(env: Env = None, max_chars: Budget = P.DEFAULT_MAX_CHARS) -> S.StaleAnswer:
        """Skills whose verification fails or is out of date (for `env`), worst first, with why."""
        data = run(kb.stale, run(parse_env, env)).model_dump(mode="json")
        return _result(S.StaleAnswer, fit_items(data, "skills", max_chars))


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
