"""`kbase history`'s answer: the timeline of one kernel family (or of some paths) in one
archived repository."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kbase.closed_sets import CardKind
from kbase.schema.base import Model


class HistoryRow(Model):
    model_config = ConfigDict(extra="allow")

    pr: int | None  # None: a commit pushed without a PR (its card is commit-<sha>.md)
    sha: str = ""
    kind: CardKind = "pr"
    date: str
    title: str
    files: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
    via_rename: bool = False


class HistoryResult(Model):
    """The timeline of one kernel family (or of paths: `kbase history --path`) in one archived
    repo, oldest first."""

    repo: str
    family: str | None
    available: bool = True  # False: this root has no PR archive at all (message says so)
    message: str | None = None
    globs: list[str] = Field(default_factory=list)
    prs: list[HistoryRow] = Field(default_factory=list)
