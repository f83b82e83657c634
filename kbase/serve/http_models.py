"""Typed bodies of the HTTP API: what each endpoint answers (its OpenAPI schema) and the errors."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from kbase.schema import EntrySummary, Health, HistoryRow, SkillAudit, StaleReport


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


class SearchBody(BaseModel):
    """POST /search: the same arguments as GET (and as MCP search), in a JSON object."""

    model_config = ConfigDict(extra="allow")  # argument aliases (question, top_k...) are mapped

    query: str | None = Field(None, description="a symptom, an error message or a topic")
    k: int | None = Field(None, description="number of hits, 1..50 (default 5)")
    kind: str | None = Field(None, description="skill or pr")
    repo: str | None = Field(None, description="only PR cards of this archive repo")
    tags: list[str] | str | None = Field(None, description="key=value filters, all must hold")
    status: list[str] | str | None = Field(None, description="only entries with these statuses")
    mode: str | None = Field(None, description="hybrid (default), bm25 or dense")
    since: str | None = Field(None, description="only PR cards dated on or after YYYY-MM-DD")
    until: str | None = Field(None, description="only PR cards dated on or before YYYY-MM-DD")
    env: str | None = Field(None, description="environment to judge statuses for")


class HistoryPage(BaseModel):
    repo: str
    family: str
    available: bool = True
    message: str | None = None
    globs: list[str] = Field(default_factory=list)
    order: str = Field("newest-first", description="always newest-first")
    total: int = Field(description="PRs matching since/until over all pages")
    prs: list[HistoryRow]
    next_cursor: str | None = Field(None, description="pass as cursor for the next, older page")


class ListPage(BaseModel):
    total: int
    counts: dict[str, dict[str, int]]
    entries: list[EntrySummary]
    next_cursor: str | None = None


class StaleAnswer(StaleReport):
    env: str | dict[str, str] | None = None


class HealthOut(Health):
    state: str = Field(
        description='"ready", or what start-up is doing (e.g. "indexing 40/868 (embed)")'
    )
    uptime_s: float


class FeedbackBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str = Field(
        min_length=1,
        max_length=120,
        pattern=r"^([a-z0-9]+(-[a-z0-9]+)*|pr:[A-Za-z0-9][A-Za-z0-9._+-]{0,99}#[0-9]{1,9})$",
        description="the entry acted on",
    )
    verdict: Literal["helpful", "harmful", "outdated"]
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


StaleAnswer.model_rebuild(_types_namespace={"SkillAudit": SkillAudit})
