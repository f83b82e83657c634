"""The one schema package: every data shape kbase reads, writes or serves.

Everything else imports from here, by name: `from kbase.schema import Hit`. The models live in
small modules by what they describe (below); importing the package defines them all (~40 ms more
than the few a cold search answers with, of a ~0.45 s search: issue #24 dropped the name table
that deferred them).

- base: `Model` (the base of every model), `NAME_RE`, the shared checks
- tags: `Tags`, `TAG_KEYS`
- skill: a skill's front-matter, `SkillMeta` and its parts
- entries: index entries and their chunks, code blocks
- problems: `Problem`
- results: search hits and results, and the claim views they show
- answers: a whole entry (`kbase get`), a line of `kbase list`, health, feedback, proposals
- status: skill statuses (`SkillAudit`) and the stale report
- ledger: run results and ledger rows, with the environment's fingerprint
- archive: PR cards and recipes
- history: `kbase history` answers

The closed sets it types with live in kbase/closed_sets.py, the search arguments in
kbase/search_query.py (both re-exported here); the tag vocabulary is data.
"""

from kbase.closed_sets import (
    TIERS,
    CardKind,
    DeviceUse,
    EntryKind,
    EntryStatus,
    Mode,
    SkillStatus,
    Tier,
    Verdict,
)
from kbase.schema.answers import (
    EntryDoc,
    EntrySummary,
    FeedbackAnswer,
    Health,
    ProposeAnswer,
    SectionText,
)
from kbase.schema.archive import FileChange, PRCard, Recipe
from kbase.schema.base import NAME_RE, Model, StrictModel, model_dump_jsonable
from kbase.schema.entries import Chunk, CodeBlock, Entry
from kbase.schema.history import HistoryResult, HistoryRow
from kbase.schema.ledger import ClaimResult, Fingerprint, LedgerRow, RunResult
from kbase.schema.problems import Problem
from kbase.schema.results import (
    ClaimMeasurement,
    ClaimView,
    Hit,
    SearchCandidate,
    SearchResult,
)
from kbase.schema.skill import (
    Audit,
    Claim,
    ClaimWhen,
    FailureMode,
    LiteralTrigger,
    SkillMeta,
    Verification,
    Watch,
)
from kbase.schema.status import ClaimCounts, SkillAudit, StaleReport
from kbase.schema.tags import TAG_KEYS, Tags
from kbase.search_query import SearchQuery

__all__ = [
    "NAME_RE",
    "TAG_KEYS",
    "TIERS",
    "Audit",
    "CardKind",
    "Chunk",
    "Claim",
    "ClaimCounts",
    "ClaimMeasurement",
    "ClaimResult",
    "ClaimView",
    "ClaimWhen",
    "CodeBlock",
    "DeviceUse",
    "Entry",
    "EntryDoc",
    "EntryKind",
    "EntryStatus",
    "EntrySummary",
    "FailureMode",
    "FeedbackAnswer",
    "FileChange",
    "Fingerprint",
    "Health",
    "HistoryResult",
    "HistoryRow",
    "Hit",
    "LedgerRow",
    "LiteralTrigger",
    "Mode",
    "Model",
    "PRCard",
    "Problem",
    "ProposeAnswer",
    "Recipe",
    "RunResult",
    "SearchQuery",
    "SearchCandidate",
    "SearchResult",
    "SectionText",
    "SkillAudit",
    "SkillMeta",
    "SkillStatus",
    "StaleReport",
    "StrictModel",
    "Tags",
    "Tier",
    "Verdict",
    "Verification",
    "Watch",
    "model_dump_jsonable",
]
