"""What kbase answers: one model each, shared by the Python API, the CLI's `--json`, HTTP and
MCP; and what the indexer makes of a file: entries (a skill or a PR card) and their chunks, and
the fenced code blocks of a parsed Markdown body."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from kbase.closed_sets import CardKind, EntryKind, SkillStatus
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


class EntryRef(Model):
    """What every answer says about an entry it names."""

    id: str = Field(description="skill name or pr:<repo>#<N>; pass it to get")
    kind: EntryKind
    title: str
    status: str = Field(description="verified, failing, stale-*, unverified, draft or mined")
    repo: str | None = None
    pr: int | None = None


class Verified(EntryRef):
    verified_on: str | None = None
    verified_at: str | None = None


class Hit(Verified):
    score: float
    path: str
    line: int
    section: str
    snippet: str
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
        default_factory=list,
        description="the top dozen or so entries in one line each, to choose from",
    )


class SectionText(Model):
    title: str
    line: int
    text: str


class EntryDoc(Verified):
    """A whole entry as `kbase get` returns it."""

    path: str
    tags: list[str] = Field(default_factory=list)
    sections: list[SectionText] = Field(default_factory=list)
    text: str = ""
    claims: list[ClaimView] = Field(default_factory=list, description="skills: claims, measured")
    # what users said after acting on it (kbase/feedback.py): counts, last date, recent notes
    feedback: dict[str, Any] | None = None


class EntrySummary(EntryRef):
    """One line of `kbase list`."""

    path: str
    tags: list[str] = Field(default_factory=list)
    date: str | None = None


class Health(Model):
    ok: bool
    generation: str | None
    entries: int = 0
    chroma: Literal["server", "embedded"]
    # files the index left out (or keeps at their last good version) because they do not parse
    degraded: int = 0
    problems: list[str] = Field(default_factory=list, description="`path:line: message`, first 50")


class ServerHealth(Health):
    """GET /healthz: the index's health, and what a server's start-up is doing."""

    state: str = Field(
        description='"ready", or what start-up is doing (e.g. "indexing 40/868 (embed)")'
    )
    uptime_s: float


class FeedbackAnswer(Model):
    recorded: dict[str, Any]
    feedback: dict[str, Any] | None


class ProposeAnswer(Model):
    name: str
    path: str
    status: Literal["draft"] = "draft"
    indexed: bool
    note: str | None = None


class ClaimCounts(Model):
    """Per skill: measured claims that hold, fail or were never measured; and cited ones."""

    held: int = 0
    failed: int = 0
    unmeasured: int = 0
    cited: int = 0


class SkillAudit(Model):
    """A skill's status as the validators judge it (`kbase stale`, the statuses search shows)."""

    skill: str
    status: SkillStatus
    last_pass: str | None = None
    verified_on: str | None = None
    reasons: list[str] = Field(default_factory=list)
    claims: ClaimCounts | None = None


class StaleReport(Model):
    """Skills that are not verified right now, worst first (the audit view of search)."""

    available: bool = True
    total: int
    counts: dict[str, int]
    skills: list[SkillAudit]
    env: str | dict[str, str] | None = Field(None, description="environment statuses are for")


class HistoryRow(Model):
    model_config = ConfigDict(extra="allow")

    pr: int | None = None  # None: a commit pushed without a PR (its card is commit-<sha>.md)
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


class Truncation(Model):
    """What an MCP answer cut to stay within its `max_chars`, and how to get the rest."""

    omitted: int | None = Field(None, description="items (hits, PRs, skills, entries) left out")
    shown_chars: int | None = Field(None, description="characters of the text shown")
    total_chars: int | None = Field(None, description="characters of the whole text")
    hint: str


class HistoryPage(HistoryResult):
    """A timeline newest first, one page of it (`kbase history --json`, HTTP, MCP)."""

    order: Literal["newest-first"] = Field("newest-first", description="always newest-first")
    total: int = Field(0, description="PRs matching since/until, over all pages")
    next_cursor: str | None = Field(None, description="pass as cursor for the next, older page")
    truncated: Truncation | None = None


class ListPage(Model):
    total: int = Field(description="entries matching the filters, over all pages")
    counts: dict[str, dict[str, int]] = Field(
        description="matching entries counted by kind, by status and by tag"
    )
    entries: list[EntrySummary]
    next_cursor: str | None = None
    truncated: Truncation | None = None


class StaleAnswer(StaleReport):
    truncated: Truncation | None = None


class CodeBlock(Model):
    info: str
    lang: str
    code: str
    line: int = Field(description="1-based line of the opening fence in the .md file")


class Chunk(Model):
    """One retrievable piece of an entry, pointing back to file and line."""

    id: str
    entry_id: str
    kind: EntryKind
    section: str
    # empty in a searcher's light copy of a generation until a hit needs it (retrieval/texts)
    text: str = ""
    line: int
    path: str

    @classmethod
    def add(
        cls,
        chunks: list[Chunk],
        entry: str,
        kind: EntryKind,
        path: str,
        section: str,
        text: str,
        line: int,
    ) -> None:
        """Append an entry's next chunk (ids number them in order), unless `text` is blank."""
        if text.strip():
            chunks.append(
                cls(
                    id=f"{entry}::{len(chunks)}",
                    entry_id=entry,
                    kind=kind,
                    section=section,
                    text=text.strip(),
                    line=line,
                    path=path,
                )
            )


class Entry(Model):
    """A skill or a PR card, as indexed."""

    id: str
    kind: EntryKind
    title: str
    path: str
    line: int = 1
    content_hash: str
    chunks: list[Chunk]
    tags: list[str] = Field(default_factory=list, description="flat key=value tags")
    repo: str | None = None
    pr: int | None = None
    date: str | None = None
    families: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
