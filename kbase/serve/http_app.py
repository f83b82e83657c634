"""`kbase serve`: a small HTTP API (FastAPI + uvicorn) over the same KnowledgeBase as MCP,
read-only unless started with `--allow-write`, behind the transport guard (kbase/serve/guard.py).
Every answer and error is a typed model in the OpenAPI document (kbase/serve/http_schema.py)."""

import logging
import time
from typing import Annotated, Any

from fastapi import Query

from kbase import schema as S
from kbase.closed_sets import ENTRY_STATUSES, EntryKind, EntryStatus, Mode
from kbase.envspec import ENV_HELP, ENV_PATTERN, parse_env
from kbase.errors import InvalidArgument
from kbase.search_query import DEFAULT_K, MAX_K, MAX_QUERY_CHARS, MAX_TAGS, SLUG_RE
from kbase.serve import http_schema as H
from kbase.serve import paging
from kbase.serve import params as P
from kbase.serve.service import RateLimit, Service

log = logging.getLogger("kbase.serve.http")


def create_app(service: Service, allow_write: bool = False, hosts: set[str] | None = None) -> Any:
    """The FastAPI app behind the transport guard (an ASGI app uvicorn can serve)."""
    from fastapi import FastAPI

    import kbase
    from kbase.serve.guard import Guard, allowed_hosts

    kb = service.kb
    app = FastAPI(
        title="kbase",
        version=kbase.__version__,
        summary="A verified knowledge base of GPU-kernel engineering experience",
        description="Search skills (each with a runnable check and a status) and mined pull "
        "requests of kernel repos. The same JSON as `kbase search --json` / `kbase get --json`. "
        "No CORS headers are sent and requests from another browser Origin are refused (403); "
        "Host must name this server (421).",
        license_info={"name": "Apache-2.0", "identifier": "Apache-2.0"},
        servers=[{"url": "/", "description": "this server"}],
    )
    H.error_handlers(app)
    # Parsing every entry for the schema's enums took seconds before a fresh root's server could
    # listen: there the archive tags are added when the schema is first asked for.
    complete = kb.is_indexed()
    tag_values, repos = H.schema_enums(kb, entries=complete)
    _search_routes(app, service, tag_values, repos)
    _read_routes(app, service, tag_values)
    if allow_write:
        _write_routes(app, kb)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            if not complete:  # the same list objects the parameters' schemas hold
                tag_values[:] = H.schema_enums(kb)[0]
            app.openapi_schema = H.tidy_openapi(FastAPI.openapi(app))
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return Guard(app, hosts if hosts is not None else allowed_hosts())


Env = Annotated[str | None, Query(description=ENV_HELP, max_length=200, pattern=ENV_PATTERN)]
_DATE = {"format": "date"}
Day = Annotated[
    str | None,
    Query(description="YYYY-MM-DD, inclusive", pattern=P.DAY_PATTERN, json_schema_extra=_DATE),
]
Cursor = Annotated[
    str | None, Query(description="next_cursor of the previous page", pattern=paging.CURSOR_PATTERN)
]
PerPage = Annotated[int, Query(ge=1, le=paging.MAX_HISTORY_LIMIT, description="PRs per page")]
ListPerPage = Annotated[int, Query(ge=1, le=paging.MAX_LIST_LIMIT, description="entries per page")]
Statuses = Annotated[
    list[EntryStatus],
    Query(description="only entries with this status, repeatable", max_length=len(ENTRY_STATUSES)),
]


def _search_routes(app: Any, service: Service, tag_values: list[str], repos: list[str]) -> None:
    """GET /search; `tag_values` and `repos` are the schema's enums (the list objects:
    create_app fills them in later on a fresh root)."""

    Tags = Annotated[
        list[str],
        Query(
            description="key=value, repeatable, all must hold (e.g. archs=sm90); GET "
            "/openapi.json lists the values this index knows",
            max_length=MAX_TAGS,
            json_schema_extra={"items": {"type": "string", "enum": tag_values}},
        ),
    ]
    repo_values = {"enum": repos} if repos else {"pattern": "^$"}
    Repo = Annotated[
        str | None,
        Query(description="only PR cards of this archive repo", json_schema_extra=repo_values),
    ]

    @app.get(
        "/search",
        summary="Search skills and PR cards",
        response_model=S.SearchResult,
        responses=H.error_responses(400, 503),
    )
    def search_get(
        q: Annotated[
            str,
            Query(
                min_length=1,
                max_length=MAX_QUERY_CHARS,
                pattern=H.QUERY_PATTERN,
                description="a symptom, an error message or a topic",
            ),
        ],
        k: Annotated[int, Query(ge=1, le=MAX_K, description="number of hits")] = DEFAULT_K,
        kind: Annotated[EntryKind | None, Query(description="only skills or only PR cards")] = None,
        repo: Repo = None,
        tag: Tags = [],  # noqa: B006
        status: Statuses = [],  # noqa: B006
        mode: Annotated[Mode, Query(description="ranking: hybrid, bm25 or dense")] = "hybrid",
        since: Day = None,
        until: Day = None,
        env: Env = None,
    ) -> S.SearchResult:
        if any(not t.strip() for t in tag):
            raise InvalidArgument("tag must be key=value, got an empty one", "tags")
        raw = {"query": q, "k": k, "kind": kind, "repo": repo, "tags": tag, "status": status}
        raw.update(mode=mode, since=since, until=until, env=env)
        # The schema says what is accepted, exactly: an empty string is not "omitted" here.
        for key in ("kind", "mode", "since", "until", "env", *(("repo",) if repos else ())):
            v = raw.get(key)
            if isinstance(v, str) and not v.strip():
                raise InvalidArgument(f"{key} is empty; leave it out instead", key)
        return service.search(S.SearchQuery.parse(**{**raw, "env": parse_env(env)}))


def _read_routes(app: Any, service: Service, tag_values: list[str]) -> None:
    from fastapi import Path

    kb = service.kb

    @app.get(
        "/entries/{entry_id}",
        summary="One entry in full (a PR id's '#' must be sent as %23)",
        response_model=S.EntryDoc,
        responses=H.error_responses(400, 404),
    )
    def entry(
        entry_id: Annotated[
            str,
            Path(description="skill name or pr:<repo>#<N>", pattern=P.ID_PATTERN, max_length=120),
        ],
        section: Annotated[
            str | None,
            Query(description="only this section (a heading title)", pattern=P.SECTION_PATTERN),
        ] = None,
        env: Env = None,
    ) -> S.EntryDoc:
        return kb.get(entry_id, section, env=parse_env(env))  # the patterns above checked both

    @app.get(
        "/history/{repo}/{family}",
        summary="The PRs of one kernel family in one archived repo, newest first, paged",
        response_model=S.HistoryPage,
        responses=H.error_responses(400, 404),
    )
    def history(
        repo: Annotated[str, Path(description="archived repo", pattern=SLUG_RE.pattern)],
        family: Annotated[str, Path(description="kernel family", pattern=SLUG_RE.pattern)],
        since: Day = None,
        until: Day = None,
        limit: PerPage = paging.DEFAULT_HISTORY_LIMIT,
        cursor: Cursor = None,
    ) -> Any:
        res = kb.history(repo, family)  # both checked by SLUG_PATTERN
        return paging.page_history(res, since, until, limit, cursor)

    _list_routes(app, service, tag_values)


def _list_routes(app: Any, service: Service, tag_values: list[str]) -> None:
    kb = service.kb

    @app.get(
        "/list",
        summary="Entries by kind, status and tag, with counts, paged",
        response_model=S.ListPage,
        responses=H.error_responses(400),
    )
    def list_entries(
        kind: Annotated[EntryKind | None, Query(description="skill or pr")] = None,
        status: Annotated[EntryStatus | None, Query(description="only this status")] = None,
        tag: Annotated[
            str | None,
            Query(
                description="only entries with this key=value tag",
                json_schema_extra={"enum": tag_values},
            ),
        ] = None,
        limit: ListPerPage = paging.DEFAULT_LIST_LIMIT,
        cursor: Cursor = None,
    ) -> Any:
        return paging.page_list(kb.list_entries(kind), status, tag, limit, cursor)

    @app.get(
        "/stale",
        summary="Skills whose verification fails or is out of date, worst first",
        response_model=S.StaleAnswer,
        responses=H.error_responses(400),
    )
    def stale(env: Env = None) -> Any:
        return kb.stale(parse_env(env))

    @app.get(
        "/healthz",
        summary="Liveness and index generation",
        response_model=S.ServerHealth,
        responses=H.error_responses(),
    )
    def healthz() -> Any:
        return service.health()


def _write_routes(app: Any, kb: Any) -> None:
    """POST /feedback and /propose (`--allow-write`), rate-limited."""
    writes = RateLimit()

    @app.post(
        "/feedback",
        summary="Record how acting on an entry went (append-only; a mild ranking signal)",
        response_model=S.FeedbackAnswer,
        responses=H.error_responses(400, 404, 413, 429),
    )
    def feedback(body: H.FeedbackBody) -> Any:
        writes.take()
        return kb.feedback(body.id, body.verdict, body.note, "http")  # ID_PATTERN checked it

    @app.post(
        "/propose",
        summary="Write a draft skill under skills/_drafts/ (status draft until reviewed)",
        response_model=S.ProposeAnswer,
        responses=H.error_responses(400, 413, 429),
    )
    def propose(body: H.ProposeBody) -> Any:
        writes.take()
        return kb.propose(body.title, body.symptom, body.cause, body.fix, body.snippet)


def run(
    root: Any = None,
    home: Any = None,
    host: str = "127.0.0.1",
    port: int = 8765,
    index_if_missing: bool = True,
    log_level: str = "warning",
    allow_write: bool = False,
) -> None:
    import uvicorn

    from kbase.api import KnowledgeBase
    from kbase.serve.guard import allowed_hosts, guarded_protocol

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving on %s: kbase has no authentication; put it behind something that has", host
        )
    t0 = time.perf_counter()
    service = Service(KnowledgeBase(root=root, home=home))
    app = create_app(service, allow_write=allow_write, hosts=allowed_hosts(host))
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level in ("info", "debug"),
        server_header=False,
        http=guarded_protocol(),
        timeout_keep_alive=5,
    )

    class Server(uvicorn.Server):
        async def startup(self, sockets: Any = None) -> None:
            await super().startup(sockets=sockets)
            # Index and warm up only once /healthz can answer (issue #27): a thread started
            # before would hold the GIL that uvicorn's start-up needs.
            log.info("listening after %.1fs", time.perf_counter() - t0)
            service.start(index_if_missing=index_if_missing)

    Server(config).run()
    service.finish()
