"""What a search answers: its hits, and a skill's claims as hits (and `kbase get`) show them."""

from __future__ import annotations

from pydantic import Field

from kbase.closed_sets import EntryKind
from kbase.schema.base import Model


class ClaimMeasurement(Model):
    """A claim's value on one environment, rendered from a ledger row."""

    env: str
    value: float | None = None
    raw: str | None = None
    holds: bool | None = None
    at: str
    signed: bool = False


class ClaimView(Model):
    """A claim as `kbase get` and search hits show it: its text and what was measured where."""

    id: str
    text: str
    expect: str | None = None
    cite: str | None = None
    locator: str | None = None
    measured: list[ClaimMeasurement] = Field(default_factory=list)
    rendered: str = Field(default="", description="the claim and its measurements, one line")


class Hit(Model):
    id: str
    kind: EntryKind
    title: str
    score: float
    status: str
    path: str
    line: int
    section: str
    snippet: str
    repo: str | None = None
    pr: int | None = None
    verified_on: str | None = None
    verified_at: str | None = None
    claims: list[ClaimView] = Field(default_factory=list, description="skills: claims, measured")
    confidence: float | None = Field(
        None, ge=0.0, le=1.0, description="estimated probability that this entry fits the query"
    )


class SearchCandidate(Model):
    """One line of the compact candidate list: enough for the caller to pick by its own reading."""

    id: str
    kind: EntryKind
    status: str
    use_when: str = Field(description="a skill's first description sentence; a PR card's title")
    trigger: str | None = Field(None, description="the trigger or symptom the query repeats most")
    confidence: float | None = Field(None, ge=0.0, le=1.0)


class SearchResult(Model):
    """What a search answers: `kbase search --json`, GET /search, MCP search (compacted)."""

    query: str
    hits: list[Hit]
    no_good_match: bool = Field(
        False, description="true when even the best hit is unlikely to fit: no entry covers this"
    )
    candidates: list[SearchCandidate] = Field(
        default_factory=list, description="the top ~10 entries in one line each, to choose from"
    )
