"""The one schema module: every data shape kbase reads, writes or serves.

Everything else imports from here. The closed sets it types with live in kbase/closed_sets.py,
the search arguments in kbase/search_query.py (re-exported here); the tag vocabulary is data.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kbase.closed_sets import (
    TIERS,
    DeviceUse,
    EntryKind,
    EntryStatus,
    Mode,
    SkillStatus,
    Tier,
    Verdict,
)
from kbase.search_query import SearchQuery

__all__ = [
    "TIERS",
    "Tier",
    "Verdict",
    "SkillStatus",
    "EntryKind",
    "EntryStatus",
    "Mode",
    "SearchQuery",
]

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _check_kebab(v: str) -> str:
    if not NAME_RE.match(v):
        raise ValueError("name must be kebab-case: lowercase letters, digits and single hyphens")
    return v


def _check_url(v: str, what: str = "source") -> str:
    if not re.match(r"^https?://\S+$", v):
        raise ValueError(f"{what} is not an http(s) URL: {v!r}")
    return v


class Model(BaseModel):
    """The base of every model here: each builds its validator when first used, not when this
    module is imported (building all of them cost ~0.1 s of every CLI start-up; a command uses a
    few)."""

    model_config = ConfigDict(defer_build=True)


class _Strict(Model):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)


# --------------------------------------------------------------------------- skills


class FailureMode(_Strict):
    symptom: str = Field(min_length=1)
    cause: str = Field(min_length=1)
    fix: str = Field(min_length=1)


class Verification(_Strict):
    """Which fenced blocks are the snippet and where it may run."""

    blocks: list[str] = Field(
        default_factory=lambda: ["verify"],
        description="info-string words that mark the snippet blocks (```python verify```)",
    )
    tiers: list[Tier] = Field(min_length=1)
    min_compute_capability: float | None = Field(default=None, ge=5.0, le=20.0)
    timeout_s: int = Field(default=120, ge=1, le=3600)
    asserts: str = Field(min_length=1, description="what the snippet proves, in one sentence")
    gpu_use: DeviceUse | None = Field(
        default=None,
        description="GPU tier only: 'exclusive' (runs alone) or 'shared'; unset, the runner infers "
        "it from the snippet (timing, profiling or device-wide memory calls make it exclusive)",
    )

    @field_validator("tiers")
    @classmethod
    def _unique_tiers(cls, v: list[str]) -> list[str]:
        if len(set(v)) != len(v):
            raise ValueError("tiers must not repeat")
        return v


class Audit(_Strict):
    date: _dt.date
    max_age_days: int = Field(default=180, ge=1, le=3650)
    by: str | None = None


class Tags(_Strict):
    languages: list[str] = Field(default_factory=list)
    kernel_types: list[str] = Field(default_factory=list)
    archs: list[str] = Field(default_factory=list)
    techniques: list[str] = Field(default_factory=list)

    @field_validator("*")  # every field is a tag key with its values in vocab.yaml
    @classmethod
    def _canonical(cls, v: list[str], info) -> list[str]:
        from kbase.vocab import canonicalize

        return canonicalize(info.field_name, v)

    def flat(self) -> list[str]:
        return [f"{k}={v}" for k in TAG_KEYS for v in getattr(self, k)]


# The tag keys are the fields of Tags (a new key: a field here and its values in vocab.yaml).
TAG_KEYS: tuple[str, ...] = tuple(Tags.model_fields)


class Watch(_Strict):
    repo: str = Field(min_length=1, description="archive repo name, e.g. flashinfer")
    paths: list[str] = Field(min_length=1, description="path globs inside that repo")


class Claim(_Strict):
    """One thing a skill states: measured by its snippet (`expect`) or cited (`cite`)."""

    id: str = Field(min_length=1, max_length=64, description="kebab-case, unique in the skill")
    text: str = Field(min_length=1, description="the claim in the skill's own words")
    expect: str | None = Field(
        default=None, description='a relation on the measured value: ">= 1.5", "in [a, b]", ...'
    )
    tiers: list[Tier] | None = Field(
        default=None, description="tiers the measurement applies to (default: every declared tier)"
    )
    cite: str | None = Field(default=None, description="URL of a source for an unmeasurable fact")
    locator: str | None = Field(default=None, description="where in the cited source")

    @field_validator("id")
    @classmethod
    def _kebab_id(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("claim id must be kebab-case: lowercase letters, digits, hyphens")
        return v

    @field_validator("expect")
    @classmethod
    def _relation(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from kbase.validators.claims import RelationError, parse_relation

        try:
            parse_relation(v)
        except RelationError as exc:
            raise ValueError(str(exc)) from None
        return v

    @field_validator("cite")
    @classmethod
    def _cite_url(cls, v: str | None) -> str | None:
        return _check_url(v, "cite") if v is not None else v

    @model_validator(mode="after")
    def _measured_or_cited(self) -> Claim:
        if (self.expect is None) == (self.cite is None):
            raise ValueError("a claim has either expect (measured) or cite + locator (cited)")
        if self.cite is not None and not (self.locator or "").strip():
            raise ValueError("a cited claim needs a locator: where in the source it says so")
        if self.tiers is not None and self.expect is None:
            raise ValueError("tiers only applies to a measured claim (one with expect)")
        return self


class LiteralTrigger(_Strict):
    """A trigger that is the exact text a tool prints; the snippet must make the tool print it."""

    literal: str = Field(min_length=1)


class SkillMeta(_Strict):
    """YAML front-matter of skills/<name>/SKILL.md."""

    name: str = Field(min_length=1, max_length=64)
    description: str = Field(min_length=1, max_length=1024)
    trigger: list[str] = Field(min_length=1)
    steps: list[str] = Field(min_length=1)
    failure_modes: list[FailureMode] = Field(min_length=1)
    verification: Verification
    audit: Audit
    tags: Tags = Field(default_factory=Tags)
    sources: list[str] = Field(default_factory=list)
    related: list[str] = Field(default_factory=list)
    watch: list[Watch] = Field(default_factory=list)
    license: str | None = None
    claims: list[Claim] = Field(default_factory=list)
    literal_triggers: list[str] = Field(
        default_factory=list,
        exclude=True,
        description="derived from `- literal:` trigger items; not written in the front-matter",
    )

    @model_validator(mode="before")
    @classmethod
    def _literal_triggers(cls, data: Any) -> Any:
        """`- literal: "text"` trigger items become plain trigger text plus a literal to check."""
        if not isinstance(data, dict):
            return data
        if "literal_triggers" in data:
            raise ValueError('write literal triggers as `- literal: "..."` items under trigger')
        items = data.get("trigger")
        if isinstance(items, list):
            literals = []
            plain: list[Any] = []
            for item in items:
                if isinstance(item, dict):
                    lit = LiteralTrigger.model_validate(item).literal
                    literals.append(lit)
                    plain.append(lit)
                else:
                    plain.append(item)
            data = {**data, "trigger": plain, "literal_triggers": literals}
        return data

    @field_validator("name")
    @classmethod
    def _kebab(cls, v: str) -> str:
        return _check_kebab(v)

    @field_validator("claims")
    @classmethod
    def _unique_claim_ids(cls, v: list[Claim]) -> list[Claim]:
        ids = [c.id for c in v]
        dups = sorted({i for i in ids if ids.count(i) > 1})
        if dups:
            raise ValueError(f"duplicate claim id(s): {', '.join(dups)}")
        return v

    @field_validator("sources")
    @classmethod
    def _urls(cls, v: list[str]) -> list[str]:
        return [_check_url(url) for url in v]

    @field_validator("trigger", "steps")
    @classmethod
    def _non_empty_items(cls, v: list[str]) -> list[str]:
        if any(not str(x).strip() for x in v):
            raise ValueError("items must be non-empty strings")
        return v


# --------------------------------------------------------------------------- parsed documents


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


class Problem(Model):
    """A problem with a location a human can jump to; `--json` always prints these five keys.

    `code` is a short kebab-case kind (`unbacked-number`, `duplicate-key`) when a tool should be
    able to tell problems apart without parsing the message.
    """

    path: str
    line: int = 0
    field: str | None = None
    code: str | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        tag = self.code or self.field
        return f"{where}: [{tag}] {self.message}" if tag else f"{where}: {self.message}"

    @classmethod
    def from_text(cls, text: str) -> Problem:
        """A problem from a `path:line: message` line (what older callers produced)."""
        m = re.match(r"^(?P<path>[^:\n]+?)(?::(?P<line>\d+))?:\s(?P<msg>.*)$", text, re.S)
        if not m:
            return cls(path="", message=text)
        return cls(path=m["path"], line=int(m["line"] or 0), message=m["msg"])


# --------------------------------------------------------------------------- search results


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


class SearchResult(Model):
    """What a search answers: `kbase search --json`, GET /search, MCP search (compacted)."""

    query: str
    hits: list[Hit]


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


class StaleReport(Model):
    """Skills that are not verified right now, worst first (the audit view of search)."""

    available: bool = True
    total: int
    counts: dict[str, int]
    skills: list[SkillAudit]


# a card for a merged PR (pr_archive/<name>/<N>.md) or for a commit pushed without one
# (pr_archive/<name>/commit-<short-sha>.md, pr: null); both index as kind "pr"
CardKind = Literal["pr", "commit"]


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


class Health(Model):
    ok: bool
    generation: str | None
    entries: int = 0
    chroma: Literal["server", "embedded"]


# --------------------------------------------------------------------------- validators


class Fingerprint(Model):
    model_config = ConfigDict(extra="allow")

    date: str
    git_commit: str | None = None
    python: str
    torch: str | None = None
    torch_cuda: str | None = None
    triton: str | None = None
    numpy: str | None = None
    nvcc: str | None = None
    driver: str | None = None
    gpu_name: str | None = None
    compute_capability: str | None = None
    interpret: bool = False


class ClaimResult(Model):
    """One measured claim in one run: the value reported and whether it held on that tier."""

    id: str
    value: float | None = None
    expect: str
    holds: bool | None = None
    raw: str | None = Field(default=None, description="the reported text when not a finite number")


class RunResult(Model):
    skill: str
    tier: Tier
    verdict: Verdict
    duration_s: float
    line: int | None = None
    message: str = ""
    claims: list[ClaimResult] = Field(default_factory=list)
    literals_seen: list[str] = Field(
        default_factory=list, description="literal triggers found in the run's captured output"
    )


class LedgerRow(Model):
    model_config = ConfigDict(extra="allow")

    skill: str
    snippet_sha256: str
    tier: Tier
    verdict: Verdict
    duration_s: float
    stderr_tail: str = ""
    fingerprint: Fingerprint
    at: str


class ClaimCounts(Model):
    """Per skill: measured claims that hold, fail or were never measured; and cited ones."""

    held: int = 0
    failed: int = 0
    unmeasured: int = 0
    cited: int = 0


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


class SkillAudit(Model):
    skill: str
    status: SkillStatus
    last_pass: str | None = None
    verified_on: str | None = None
    reasons: list[str] = Field(default_factory=list)
    claims: ClaimCounts | None = None


# --------------------------------------------------------------------------- PR archive


class FileChange(Model):
    model_config = ConfigDict(extra="forbid")

    path: str
    added: int | None = None
    deleted: int | None = None
    symbols: list[str] = Field(default_factory=list)
    old_path: str | None = None
    # per symbol, who named it: tree-sitter | scanner | hunk-header (no grammar for the language)
    named_by: list[str] = Field(default_factory=list)
    kernels: list[str] = Field(default_factory=list)  # the symbols that are GPU kernels


class PRCard(Model):
    """Front-matter of pr_archive/<name>/<N>.md (or commit-<short-sha>.md for a direct push)."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    pr: int | None
    kind: CardKind = "pr"
    url: str | None = None
    sha: str
    date: str
    title: str
    families: list[str] = Field(default_factory=list)
    files: list[FileChange] = Field(default_factory=list)
    totals: dict[str, int] = Field(default_factory=dict)
    categories: list[str] = Field(default_factory=list)
    reverts: int | None = None
    tags: Tags = Field(default_factory=Tags)
    reverts_commit: str | None = None  # a reverted direct push (its sha, as the body names it)
    reverted_by: list[str] = Field(default_factory=list)  # "#N" for a PR, a short sha for a push
    description: str | None = None  # the commit body, cleaned of template boilerplate
    co_authors: list[str] = Field(default_factory=list)
    issues: list[int] = Field(default_factory=list)
    numbers: list[str] = Field(default_factory=list)  # numbers with units from the description
    touched: list[str] = Field(default_factory=list)  # symbols, ranked: kernels first, tests last
    key_diff: str | None = None  # at most 20 diff lines from the most significant hunks
    also: list[str] = Field(default_factory=list)  # other commits that carry the same PR number


# --------------------------------------------------------------------------- recipes


class Recipe(Model):
    """pr_archive/recipes/<name>.yaml: a repository, its upstream and its families' path globs."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, description="archive name: pr_archive/<name>/")
    upstream: str | None = Field(default=None, description="https://github.com/<owner>/<repo>")
    description: str | None = None
    families: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _kebab(cls, v: str) -> str:
        return _check_kebab(v)

    @field_validator("upstream")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return _check_url(v, "upstream").rstrip("/") if v is not None else v

    @field_validator("families")
    @classmethod
    def _families(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for fam, globs in v.items():
            if not re.match(r"^[a-z0-9][a-z0-9_.-]*$", str(fam)):
                raise ValueError(f"family {fam!r}: use lowercase letters, digits, '.', '_' or '-'")
            if not globs or not all(isinstance(g, str) and g.strip() for g in globs):
                raise ValueError(f"family {fam!r} needs a non-empty list of path globs")
            from kbase.globs import compile_glob, compile_globs

            try:  # the family's matcher (Recipe.matcher) compiles, and is kept, or ...
                compile_globs(tuple(globs))
            except Exception:  # ... the glob that fails says so: ValueError on a malformed one
                for g in globs:
                    compile_glob(g)
                raise
        return v

    def pr_url(self, pr: int) -> str | None:
        return f"{self.upstream}/pull/{pr}" if self.upstream else None

    def digest(self) -> str:
        """Changes when anything that shapes a card changes (families, upstream)."""
        blob = json.dumps({"upstream": self.upstream, "families": self.families}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def matcher(self):
        from kbase.globs import FamilyMatcher

        return FamilyMatcher(self.families)


def model_dump_jsonable(model: BaseModel) -> dict[str, Any]:
    return model.model_dump(mode="json")
