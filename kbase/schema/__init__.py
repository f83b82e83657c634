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
- answers: what kbase answers (hits, entries, listings, health, statuses, history, pages),
  one model each for the API, the CLI, HTTP and MCP
- ledger: run results and ledger rows, with the environment's fingerprint
- archive: PR cards and recipes

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
from kbase.schema.ledger import ClaimResult, Fingerprint, LedgerRow, RunResult
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
