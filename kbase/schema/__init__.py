"""The one schema package: every data shape kbase reads, writes or serves, imported from here by
name (`from kbase.schema import Hit`). Importing it defines every model (~40 ms more than the
few a cold search needs, of a ~0.45 s search: cheaper than a table of lazy names)."""

from kbase.schema.answers import (
    Chunk,
    ClaimCounts,
    ClaimMeasurement,
    ClaimView,
    CodeBlock,
    Entry,
    EntryDoc,
    EntryRef,
    EntrySummary,
    FeedbackAnswer,
    Health,
    HistoryPage,
    HistoryResult,
    HistoryRow,
    Hit,
    ListPage,
    ProposeAnswer,
    SearchCandidate,
    SearchResult,
    SectionText,
    ServerHealth,
    SkillAudit,
    StaleAnswer,
    StaleReport,
    Truncation,
    Verified,
)
from kbase.schema.archive import FileChange, PRCard, Recipe
from kbase.schema.base import NAME_RE, TAG_KEYS, Model, Problem, StrictModel, Tags
from kbase.schema.skill import (
    Audit,
    Claim,
    ClaimResult,
    ClaimWhen,
    FailureMode,
    LedgerRow,
    LedgerSig,
    LiteralTrigger,
    RunResult,
    SkillMeta,
    Verification,
    Watch,
)
from kbase.search_query import SearchQuery
