"""Typed bodies of the HTTP API: what each endpoint answers (its OpenAPI schema), and the errors
as every endpoint answers them."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from kbase.closed_sets import FeedbackVerdict
from kbase.errors import KbaseError
from kbase.serve import http_schema as H
from kbase.serve.params import ID_PATTERN

log = logging.getLogger("kbase.serve.http")


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
    async def _invalid(_req: Any, exc: RequestValidationError) -> Any:
        # Name the fields, not the values: the values are the client's own (possibly huge) input.
        parts = []
        for e in exc.errors()[:5]:
            loc = ".".join(str(x) for x in e.get("loc", ()) if x not in ("query", "body", "path"))
            parts.append(H.message(loc or "request", e))
        return _error(400, "; ".join(parts) or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(req: Any, exc: StarletteHTTPException) -> Any:
        headers = getattr(exc, "headers", None)
        if exc.status_code == 405:  # Allow lists every method of the path, not the first route's
            from starlette.routing import Match

            methods: set[str] = set()
            for route in app.routes:
                route_methods = getattr(route, "methods", None)
                if route_methods and route.matches(req.scope)[0] != Match.NONE:
                    methods |= set(route_methods)
            headers = {"Allow": ", ".join(sorted(methods))}
        return _error(exc.status_code, str(exc.detail), headers)

    @app.exception_handler(Exception)
    async def _crash(req: Any, exc: Exception) -> Any:
        log.exception("internal error on %s %s", req.method, req.url.path)
        return _error(500, "internal error (logged on the server)")


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1,
        max_length=120,
        pattern=ID_PATTERN,
        description="the entry acted on",
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
