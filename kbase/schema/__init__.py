"""The one schema package: every data shape kbase reads, writes or serves.

Everything else imports from here, by name: `from kbase.schema import Hit`. The models live in
small modules by what they describe (below), and a name is looked up on first use (PEP 562):
importing it imports only the module that defines it. A cold `kbase search` then defines the
search models and an incremental `kbase mine` the card models, not all ~35 of them (defining a
pydantic class costs ~1 ms even with its validator deferred; issues #11 and #12).

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

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

# which module defines each name (a new model: its module here, in the imports below and in
# __all__; tests/test_schema_package.py checks that the three agree)
_MODULES: dict[str, tuple[str, ...]] = {
    "kbase.closed_sets": (
        "TIERS",
        "CardKind",
        "DeviceUse",
        "EntryKind",
        "EntryStatus",
        "Mode",
        "SkillStatus",
        "Tier",
        "Verdict",
    ),
    "kbase.search_query": ("SearchQuery",),
    "kbase.schema.base": ("NAME_RE", "Model", "StrictModel", "model_dump_jsonable"),
    "kbase.schema.tags": ("TAG_KEYS", "Tags"),
    "kbase.schema.skill": (
        "Audit",
        "Claim",
        "ClaimWhen",
        "FailureMode",
        "FeedbackAnswer",
        "LiteralTrigger",
        "SkillMeta",
        "Verification",
        "Watch",
    ),
    "kbase.schema.entries": ("Chunk", "CodeBlock", "Entry"),
    "kbase.schema.problems": ("Problem",),
    "kbase.schema.results": ("ClaimMeasurement", "ClaimView", "Hit", "SearchResult"),
    "kbase.schema.answers": (
        "EntryDoc",
        "EntrySummary",
        "FeedbackAnswer",
        "Health",
        "ProposeAnswer",
        "SectionText",
    ),
    "kbase.schema.status": ("ClaimCounts", "SkillAudit", "StaleReport"),
    "kbase.schema.ledger": ("ClaimResult", "Fingerprint", "LedgerRow", "RunResult"),
    "kbase.schema.archive": ("FileChange", "PRCard", "Recipe"),
    "kbase.schema.history": ("HistoryResult", "HistoryRow"),
}
_WHERE: dict[str, str] = {name: mod for mod, names in _MODULES.items() for name in names}

if TYPE_CHECKING:  # what type checkers and editors see; at run time, __getattr__ below
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
    from kbase.schema.results import ClaimMeasurement, ClaimView, Hit, SearchResult
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


if not TYPE_CHECKING:  # hidden from type checkers, so that a misspelt name is still an error

    def __getattr__(name: str) -> Any:
        """`kbase.schema.NAME`: imported from its module on first use, then kept here."""
        mod = _WHERE.get(name)
        if mod is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(import_module(mod), name)
        globals()[name] = value
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
