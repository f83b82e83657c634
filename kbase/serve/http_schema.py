"""The HTTP API's contract (`kbase serve`): enums from the index, the write bodies, every error
(FastAPI's validation errors reworded) and the OpenAPI document tidied, so that a schema-driven
fuzzer (schemathesis) and the server agree."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kbase.closed_sets import FeedbackVerdict, vocabulary
from kbase.envspec import parse_env
from kbase.errors import KbaseError
from kbase.schema import SearchQuery
from kbase.serve.paging import MAX_LIST_LIMIT
from kbase.serve.params import ID_PATTERN

QUERY_PATTERN = r"^[^\x00]*[^\s\x00][^\x00]*$"  # not blank, no NUL
log = logging.getLogger("kbase.serve.http")


def schema_enums(kb: Any, entries: bool = True) -> tuple[list[str], list[str]]:
    """Every tag filter value and archive repo this server accepts now, for the OpenAPI schema
    (the parser stays the authority: it also names the nearest value of a wrong one).
    `entries=False`: the vocabulary's tags and the archive's folder names only, without parsing
    a file: a server on a fresh root must listen before its index exists (issue #27)."""
    tags = {
        f"{k}={v}" for k, spec in vocabulary().items() for v in [*spec["values"], *spec["aliases"]]
    }
    if not entries:
        base = kb.root / "pr_archive"
        dirs = base.iterdir() if base.is_dir() else ()
        return sorted(tags), sorted(d.name for d in dirs if d.is_dir() and any(d.glob("*.md")))
    archive = kb.archive_tags()
    return sorted(tags | archive), sorted(t[5:] for t in archive if t.startswith("repo="))


def message(e: dict[str, Any]) -> str:
    """One FastAPI validation error in the words the CLI and MCP use; it names the field, not
    the value: the values are the client's own (possibly huge) input."""
    loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "body", "path"))
    loc = loc or "request"
    kind = e.get("type", "")
    if kind == "missing":
        return f"{loc} is required"
    if kind in ("greater_than_equal", "less_than_equal") and loc == "limit":
        return f"limit must be between 1 and {MAX_LIST_LIMIT}, got {str(e.get('input'))[:20]}"
    if kind == "int_parsing":
        return f"{loc} must be an integer"
    if kind == "string_pattern_mismatch" and loc == "env":
        try:
            parse_env(str(e.get("input")))
        except KbaseError as exc:
            return str(exc)
    return f"{loc}: {e.get('msg', 'invalid')}"


def tidy_openapi(spec: dict[str, Any]) -> dict[str, Any]:
    """No authentication, said on every operation; 400 (not 422) for validation errors."""
    for ops in spec.get("paths", {}).values():
        for op in ops.values():
            op["security"] = []
            op.get("responses", {}).pop("422", None)
    schemas = spec.get("components", {}).get("schemas", {})
    for unused in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unused, None)
    return spec


class ErrorDetail(BaseModel):
    status: int = Field(description="the HTTP status, repeated")
    message: str = Field(description="what was wrong and what is accepted")


class ErrorBody(BaseModel):
    error: ErrorDetail


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    what = {
        403: "the request came from a browser page of another Origin (no CORS)",
        421: "the Host header does not name this server (DNS-rebinding guard)",
        400: "a parameter or the body is not accepted (the message names it and the valid values)",
        404: "no such entry, section, archive or family (the message names the nearest ones)",
        413: "the request body is larger than 64 KiB",
        429: "too many writes; try again later",
        503: "the server has no index yet (run `kbase index`)",
    }
    return {c: {"model": ErrorBody, "description": what[c]} for c in (*codes, 403, 421)}


def _error(status: int, message: str, headers: dict[str, str] | None = None) -> Any:
    from fastapi.responses import JSONResponse

    body = ErrorBody.model_validate({"error": {"status": status, "message": message}})
    return JSONResponse(body.model_dump(), status_code=status, headers=headers)


def error_handlers(app: Any) -> None:
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException as StarletteHTTPException

    @app.exception_handler(KbaseError)
    async def _kbase_error(_req: Any, exc: KbaseError) -> Any:
        if exc.http_status >= 500:  # a broken file in the knowledge base, not a crash
            log.warning("%s", exc)
        return _error(exc.http_status, str(exc))

    @app.exception_handler(RequestValidationError)
    async def _invalid(req: Any, exc: RequestValidationError) -> Any:
        if req.url.path == "/search":  # SearchQuery's message, as the CLI and MCP give (issue #9)
            qp = req.query_params
            raw = {k: qp.get(k) for k in ("k", "kind", "repo", "mode", "since", "until")}
            try:
                parse_env(qp.get("env"))
                SearchQuery.parse(
                    query=qp.get("q"), tags=qp.getlist("tag"), status=qp.getlist("status"), **raw
                )
            except KbaseError as said:
                return _error(400, str(said))
        parts = [message(e) for e in exc.errors()[:5]]
        return _error(400, "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Any, exc: StarletteHTTPException) -> Any:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Allow lists every method of the path, not the first route's
            from starlette.routing import Match

            routes = [r for r in app.routes if getattr(r, "methods", None)]
            hits = [r for r in routes if r.matches(req.scope)[0] != Match.NONE]
            headers = {"Allow": ", ".join(sorted({m for r in hits for m in r.methods}))}
        return _error(exc.status_code, str(exc.detail), headers)

    @app.exception_handler(Exception)
    async def _crash(req: Any, exc: Exception) -> Any:
        log.exception("internal error on %s %s", req.method, req.url.path)
        return _error(500, "internal error (logged on the server)")


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1, max_length=120, pattern=ID_PATTERN, description="the entry acted on"
    )
    verdict: FeedbackVerdict
    note: str = Field(
        "", max_length=1000, pattern=r"^[^\x00-\x08\x0b-\x1f\x7f]*$", description="what happened"
    )


class ProposeBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    title: str = Field(min_length=1, max_length=120)
    symptom: str = Field(min_length=1, max_length=2000, description="symptom or literal error text")
    cause: str = Field(min_length=1, max_length=2000)
    fix: str = Field(min_length=1, max_length=2000)
    snippet: str | None = Field(None, max_length=20_000, description="optional Python check")
