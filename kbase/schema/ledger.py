"""What a verification run records: its result and its claims' values (`--json`), and the ledger
row that keeps them with the environment it ran on (ledger/*.jsonl)."""

from __future__ import annotations

import datetime as dt
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, ConfigDict, Field

from kbase.closed_sets import Tier, Verdict
from kbase.schema.base import Model

# A ledger row is checked as readers use its fields, in strict mode (no coercion; a bool is no
# number), by its writer too: a row of other types is refused with its line, not a TypeError deep
# in a status (a list for `skill` cannot key a dict). Keys beyond these are kept and not checked.
_STRICT = ConfigDict(strict=True, extra="allow")


def _iso_day(at: str) -> str:
    dt.date.fromisoformat(at[:10])  # ValueError: not an ISO timestamp
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
