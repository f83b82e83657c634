"""A skill's status as the validators judge it (`kbase stale`, the statuses search shows)."""

from __future__ import annotations

from pydantic import Field

from kbase.closed_sets import SkillStatus
from kbase.schema.base import Model


class ClaimCounts(Model):
    """Per skill: measured claims that hold, fail or were never measured; and cited ones."""

    held: int = 0
    failed: int = 0
    unmeasured: int = 0
    cited: int = 0


class SkillAudit(Model):
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
