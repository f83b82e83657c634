"""What a verification run records: its result, its claims' values, the environment it ran on,
and the ledger row that keeps all three (ledger/*.jsonl)."""

from __future__ import annotations

from pydantic import ConfigDict, Field

from kbase.closed_sets import Tier, Verdict
from kbase.schema.base import Model


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
    cpu_model: str | None = None
    cpu_flags: list[str] | None = Field(
        default=None, description="the host's CPU features that change torch's CPU kernels"
    )


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
