"""A skill's front-matter (skills/<name>/SKILL.md): what it claims and how it is verified; and
what a verification run records: its result and its claims' values (`--json`), and the ledger
row that keeps them with the environment it ran on (ledger/*.jsonl)."""

from __future__ import annotations

import datetime as _dt
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field, field_validator, model_validator

from kbase.closed_sets import CPU_FLAGS, DeviceUse, Tier, Verdict
from kbase.schema.base import NAME_RE, Kebab, Model, StrictModel, Tags, check_url


class FailureMode(StrictModel):
    symptom: str = Field(min_length=1)
    cause: str = Field(min_length=1)
    fix: str = Field(min_length=1)


class Verification(StrictModel):
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


class Audit(StrictModel):
    date: _dt.date
    max_age_days: int = Field(default=180, ge=1, le=3650)
    by: str | None = None


class Watch(StrictModel):
    repo: str = Field(min_length=1, description="archive repo name, e.g. flashinfer")
    paths: list[str] = Field(min_length=1, description="path globs inside that repo")


class ClaimWhen(StrictModel):
    """The environments a measured claim holds on; it is judged only there (every field given
    must match). A run elsewhere still records the value, which `kbase get` shows."""

    gpu: list[str] | None = Field(
        default=None, description='GPU names it holds on, matched as substrings: ["H100", "H200"]'
    )
    arch: list[str] | None = Field(default=None, description='compute capabilities: ["sm90"]')
    triton: str | None = Field(default=None, description='a version range: ">=3.6,<3.9"')
    torch: str | None = Field(default=None, description='a version range: ">=2.11"')
    numpy: str | None = Field(default=None, description='a version range: ">=2.4"')
    cpu_flags: list[str] | None = Field(
        default=None,
        description='host CPU features it needs ("amx_int8") or needs absent ("!amx_int8"); '
        "names from kbase.closed_sets.CPU_FLAGS",
    )

    @field_validator("arch")
    @classmethod
    def _arch(cls, v: list[str] | None) -> list[str] | None:
        for a in v or []:
            if not re.fullmatch(r"sm\d{2,3}[af]?", a):
                raise ValueError(f"{a!r} is not an arch like sm90, sm90a or sm100")
        return v

    @field_validator("triton", "torch", "numpy")
    @classmethod
    def _range(cls, v: str | None) -> str | None:
        if v is not None:
            from packaging.specifiers import InvalidSpecifier, SpecifierSet

            try:
                SpecifierSet(v)
            except InvalidSpecifier:
                raise ValueError(f"{v!r} is not a version range like '>=3.6,<3.9'") from None
        return v

    @field_validator("cpu_flags")
    @classmethod
    def _flags(cls, v: list[str] | None) -> list[str] | None:
        for f in v or []:
            if f.lstrip("!") not in CPU_FLAGS:
                raise ValueError(f"unknown CPU flag {f!r}; known: {', '.join(CPU_FLAGS)}")
        return v


class Claim(StrictModel):
    """One thing a skill states: measured by its snippet (`expect`) or cited (`cite`)."""

    id: str = Field(min_length=1, max_length=64, description="kebab-case, unique in the skill")
    text: str = Field(min_length=1, description="the claim in the skill's own words")
    expect: str | None = Field(
        default=None, description='a relation on the measured value: ">= 1.5", "in [a, b]", ...'
    )
    tiers: list[Tier] | None = Field(
        default=None, description="tiers the measurement applies to (default: every declared tier)"
    )
    when: ClaimWhen | None = Field(
        default=None, description="the environments the measurement holds on (default: all)"
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
        return check_url(v, "cite") if v is not None else v

    @model_validator(mode="after")
    def _measured_or_cited(self) -> Claim:
        if (self.expect is None) == (self.cite is None):
            raise ValueError("a claim has either expect (measured) or cite + locator (cited)")
        if self.cite is not None and not (self.locator or "").strip():
            raise ValueError("a cited claim needs a locator: where in the source it says so")
        for key in ("tiers", "when"):
            if getattr(self, key) is not None and self.expect is None:
                raise ValueError(f"{key} only applies to a measured claim (one with expect)")
        return self


class LiteralTrigger(StrictModel):
    """A trigger that is the exact text a tool prints; the snippet must make the tool print it."""

    literal: str = Field(min_length=1)
    when: ClaimWhen | None = Field(
        default=None,
        description="the environments that print it (an error text one release changed); "
        "runs elsewhere are not expected to show it",
    )


class SkillMeta(StrictModel):
    """YAML front-matter of skills/<name>/SKILL.md."""

    name: Kebab = Field(min_length=1, max_length=64)
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
    literal_when: dict[str, LiteralTrigger] = Field(
        default_factory=dict,
        exclude=True,
        description="derived: the literal triggers that declare `when`, by text",
    )

    @model_validator(mode="before")
    @classmethod
    def _literal_triggers(cls, data: Any) -> Any:
        """`- literal: "text"` trigger items become plain trigger text plus a literal to check."""
        if not isinstance(data, dict):
            return data
        if "literal_triggers" in data or "literal_when" in data:
            raise ValueError('write literal triggers as `- literal: "..."` items under trigger')
        items = data.get("trigger")
        if isinstance(items, list):
            read = [LiteralTrigger.model_validate(i) if isinstance(i, dict) else i for i in items]
            lits = [t for t in read if isinstance(t, LiteralTrigger)]
            data = {
                **data,
                "trigger": [t.literal if isinstance(t, LiteralTrigger) else t for t in read],
                "literal_triggers": [t.literal for t in lits],
                "literal_when": {t.literal: t for t in lits if t.when is not None},
            }
        return data

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
        return [check_url(url) for url in v]

    @field_validator("trigger", "steps")
    @classmethod
    def _non_empty_items(cls, v: list[str]) -> list[str]:
        if any(not str(x).strip() for x in v):
            raise ValueError("items must be non-empty strings")
        return v


# A ledger row is checked as readers use its fields, in strict mode (no coercion; a bool is no
# number), by its writer too: a row of other types is refused with its line, not a TypeError deep
# in a status (a list for `skill` cannot key a dict). Keys beyond these are kept and not checked.
_STRICT = ConfigDict(strict=True, extra="allow")


def _iso_day(at: str) -> str:
    _dt.date.fromisoformat(at[:10])  # ValueError: not an ISO timestamp
    return at


class ClaimResult(Model):
    """One measured claim in one run: the value reported and whether it held on that tier."""

    model_config = _STRICT
    id: str
    value: float | None = None
    expect: str = ""
    holds: bool | None = None
    raw: str | None = Field(default=None, description="the reported text when not a finite number")


class LedgerSig(Model):
    model_config = _STRICT
    alg: Literal["ed25519"]
    key: Any
    value: Any


class LedgerRow(Model):
    model_config = _STRICT
    skill: str
    snippet_sha256: str
    tier: Tier
    verdict: Verdict
    duration_s: float
    # the environment (validators/fingerprint.py): versions, GPU, CPU model and flags, date
    fingerprint: dict[str, str | bool | list[str] | None]
    at: Annotated[str, AfterValidator(_iso_day)]
    line: int | None = None
    message: str = ""
    stderr_tail: str = ""
    isolated: bool = True
    limits: dict[str, Any] = {}
    claims: list[ClaimResult] = []
    literals_seen: list[str] = []
    sig: LedgerSig | None = None


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
