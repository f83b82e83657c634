"""The one schema package: every data shape kbase reads, writes or serves, imported from here by
name (`from kbase.schema import Hit`). Importing it defines every model (~40 ms more than the
few a cold search needs, of a ~0.45 s search: cheaper than a table of lazy names)."""

from kbase.schema.answers import (
    ClaimCounts,
    ClaimMeasurement,
    ClaimView,
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
from kbase.schema.base import NAME_RE, Model, StrictModel
from kbase.schema.entries import Chunk, CodeBlock, Entry
from kbase.schema.ledger import ClaimResult, LedgerRow, LedgerSig, RunResult
from kbase.schema.problems import Problem
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
from kbase.schema.tags import TAG_KEYS, Tags
from kbase.search_query import SearchQuery
