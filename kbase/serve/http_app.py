"""`kbase serve`: a small read-only HTTP API (FastAPI + uvicorn) over the same Service as MCP.

Errors are JSON `{"error": {"status", "message"}}` with a 4xx code for bad input; an internal
fault is logged on the server and answered with a bare 500, never a traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from kbase.closed_sets import KINDS, MODE_HELP
from kbase.errors import KbaseError
from kbase.serve import params as P
from kbase.serve.service import Service

log = logging.getLogger("kbase.serve.http")

MAX_BODY_BYTES = 64 * 1024  # POST /search carries one query; anything bigger is a mistake or abuse


def _error(status: int, message: str):
    from fastapi.responses import JSONResponse

    return JSONResponse({"error": {"status": status, "message": message}}, status_code=status)


def create_app(service: Service):
    from fastapi import Body, FastAPI, Query, Request
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    import kbase

    app = FastAPI(
        title="kbase",
        version=kbase.__version__,
        description="Search a verified knowledge base of GPU-kernel engineering experience. "
        "Read-only. The same JSON as `kbase search --json` / `kbase get --json`.",
    )

    @app.middleware("http")
    async def _limit_body(request: Request, call_next):
        size = request.headers.get("content-length")
        if size is not None and (not size.isdigit() or int(size) > MAX_BODY_BYTES):
            return _error(413, f"request body larger than {MAX_BODY_BYTES} bytes")
        return await call_next(request)

    @app.exception_handler(KbaseError)
    async def _kbase_error(_req, exc: KbaseError):
        # deliberate errors carry their status (400 bad input, 404, 503 no index) and a message
        # meant for the client; a 500 here is a broken file in the knowledge base, not a crash
        if exc.http_status >= 500:
            log.warning("%s", exc)
        return _error(exc.http_status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(_req, exc: RequestValidationError):
        # Name the fields, not the values: the values are the client's own (possibly huge) input.
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "body", "path"))
            parts.append(f"{loc or 'request'}: {e.get('msg', 'invalid')}")
        return _error(422, "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(_req, exc: StarletteHTTPException):
        return _error(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _crash(req, exc: Exception):
        log.exception("internal error on %s %s", req.method, req.url.path)
        return _error(500, "internal error (logged on the server)")

    def _search(raw: dict[str, Any]) -> dict:
        query, _max_chars = P.search_args(raw)
        return service.search(query).model_dump(mode="json")

    @app.get("/search", summary="Search skills and PR cards")
    def search_get(
        q: str | None = Query(
            None, description="what you are looking for (also accepted as `query`)"
        ),
        query: str | None = Query(None, include_in_schema=False),
        k: str | None = Query(None, description=f"number of hits, 1..{P.MAX_K}"),
        kind: str | None = Query(None, description=" or ".join(KINDS)),
        repo: str | None = Query(None, description="only PR cards of this archive repo"),
        tag: list[str] = Query([], description="key=value, repeatable (e.g. archs=sm90)"),
        status: list[str] = Query([], description="only entries with this status, repeatable"),
        mode: str | None = Query(None, description=", ".join(MODE_HELP)),
        since: str | None = Query(None, description="only PR cards dated on or after YYYY-MM-DD"),
        until: str | None = Query(None, description="only PR cards dated on or before YYYY-MM-DD"),
    ) -> dict:
        return _search(
            {
                "query": q if q is not None else query,
                "k": k,
                "kind": kind,
                "repo": repo,
                "tags": tag,
                "status": status,
                "mode": mode,
                "since": since,
                "until": until,
            }
        )

    @app.post("/search", summary="Search, with the arguments in a JSON body")
    def search_post(
        body: dict = Body(..., examples=[{"query": "illegal memory access", "k": 5}]),
    ) -> dict:
        return _search(P.apply_aliases("search", body))

    @app.get("/entries/{entry_id}", summary="One entry in full (a PR id's '#' must be sent as %23)")
    def entry(
        entry_id: str, section: str | None = Query(None, description="only this section")
    ) -> dict:
        doc = service.get(P.check_id(entry_id), P.check_section(section))
        return doc.model_dump(mode="json")

    @app.get(
        "/history/{repo}/{family}", summary="Timeline of one kernel family in one archived repo"
    )
    def history(repo: str, family: str) -> dict:
        return service.history(P.require_slug("repo", repo), P.require_slug("family", family))

    @app.get("/stale", summary="Skills whose verification fails or is out of date")
    def stale() -> dict:
        return service.stale()

    @app.get("/healthz", summary="Liveness and index generation")
    def healthz() -> dict:
        return service.health()

    return app


def run(
    root=None,
    home=None,
    host: str = "127.0.0.1",
    port: int = 8765,
    index_if_missing: bool = True,
    log_level: str = "warning",
) -> None:
    import uvicorn

    if host not in ("127.0.0.1", "localhost", "::1"):
        log.warning(
            "serving on %s: kbase has no authentication; put it behind something that has", host
        )
    service = Service.open(root=root, home=home, index_if_missing=index_if_missing)
    app = create_app(service)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level=log_level,
        access_log=log_level in ("info", "debug"),
        server_header=False,
    )
