"""The API's other answers: a whole entry (`kbase get`), a line of `kbase list`, the index's
health, and what recording feedback and proposing a skill answer (the same models for the
API, HTTP and MCP)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from kbase.closed_sets import EntryKind
from kbase.schema.base import Model
from kbase.schema.results import ClaimView


class SectionText(Model):
    title: str
    line: int
    text: str


class EntryDoc(Model):
    """A whole entry as `kbase get` returns it."""

    id: str
    kind: EntryKind
    title: str
    path: str
    status: str
    repo: str | None = None
    pr: int | None = None
    tags: list[str] = Field(default_factory=list)
    verified_on: str | None = None
    verified_at: str | None = None
    sections: list[SectionText] = Field(default_factory=list)
    text: str = ""
    claims: list[ClaimView] = Field(default_factory=list, description="skills: claims, measured")
    # what users said after acting on it (kbase/feedback.py): counts, last date, recent notes
    feedback: dict[str, Any] | None = None


class EntrySummary(Model):
    """One line of `kbase list`."""

    id: str
    kind: EntryKind
    title: str
    path: str
    status: str
    tags: list[str] = Field(default_factory=list)
    repo: str | None = None
    pr: int | None = None
    date: str | None = None


class Health(Model):
    ok: bool
    generation: str | None
    entries: int = 0
    chroma: Literal["server", "embedded"]
    # files the index left out (or keeps at their last good version) because they do not parse
    degraded: int = 0
    problems: list[str] = Field(default_factory=list, description="`path:line: message`, first 50")


class FeedbackAnswer(Model):
    recorded: dict[str, Any]
    feedback: dict[str, Any] | None


class ProposeAnswer(Model):
    name: str
    path: str
    status: Literal["draft"] = "draft"
    indexed: bool
    note: str | None = None
