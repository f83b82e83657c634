"""Every closed set kbase knows, defined once with its behaviour beside it (tag keys and values:
kbase.schema.Tags, kbase/data/vocab.yaml). Imports nothing from kbase: every layer may use it."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

NAME_RE = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")  # skill and archive names: kebab-case


def _by_name(*specs: Any) -> dict[str, Any]:
    return {s.name: s for s in specs}


# --------------------------------------------------------------------------- verification tiers

Tier = Literal["cpu-interpret", "cpu-compile", "gpu"]


@dataclass(frozen=True)
class TierSpec:
    name: str
    # what the machine needs, any one of these (probes in validators/fingerprint.py: REQUIREMENTS)
    needs_any: tuple[str, ...]
    # how the runner runs it
    env: dict[str, str] = field(default_factory=dict)  # extra environment for the snippet
    sees_gpu: bool = False  # False: CUDA_VISIBLE_DEVICES="" and the fingerprint omits the GPU
    python_only: bool = False  # only Python snippets run here (no nvcc step)
    cuda_runs_binary: bool = False  # CUDA snippets: build and run (True) or compile only (False)
    # runs pass the device gate (validators/device_gate.py): with -j N, runs that time, profile
    # or read device-wide memory hold the device alone; correctness-only runs share it
    device_gate: bool = False
    memory_kind: Literal["as", "data"] = "as"  # which rlimit caps memory (CUDA maps huge VA)
    default_memory_mb: int = 8192
    # how reports show it
    colour: str = "#5b6672"


TIER_SPECS: dict[str, TierSpec] = _by_name(
    TierSpec(
        name="cpu-interpret",
        needs_any=("triton",),
        env={"TRITON_INTERPRET": "1"},
        python_only=True,
        colour="#3b7dd8",
    ),
    TierSpec(name="cpu-compile", needs_any=("triton", "nvcc"), colour="#8a5cd6"),
    TierSpec(
        name="gpu",
        needs_any=("gpu",),
        sees_gpu=True,
        cuda_runs_binary=True,
        device_gate=True,
        memory_kind="data",
        default_memory_mb=32768,
        colour="#2e9b4f",
    ),
)
TIERS: tuple[str, ...] = get_args(Tier)
TIER_CHOICES: tuple[str, ...] = ("auto", *TIERS)
assert tuple(TIER_SPECS) == TIERS, "TIER_SPECS and Tier must list the same tiers, in order"

# --------------------------------------------------------------------------- host CPU features

# The x86 feature flags (as /proc/cpuinfo spells them) that change which CPU kernel torch runs, so a
# CPU-tier claim about a torch operator can hold on one host and not another. Fingerprints record
# the ones a host has; a claim's `when: {cpu_flags: [...]}` may name only these.
CPU_FLAGS: dict[str, str] = {
    "avx2": "AVX2: torch's AVX2 kernels (ATen CPU capability)",
    "avx512f": "AVX-512: torch's AVX512 kernels (ATen CPU capability)",
    "avx512_vnni": "AVX-512 VNNI: oneDNN int8 dot products",
    "avx512_bf16": "AVX-512 BF16: oneDNN bf16 matmuls in hardware",
    "avx512_fp16": "AVX-512 FP16",
    "amx_tile": "AMX tiles (Sapphire Rapids and later Xeons)",
    "amx_int8": "AMX-INT8: fp8/int8 _scaled_mm goes through oneDNN (aten/src/ATen/native/Blas.cpp)",
    "amx_bf16": "AMX-BF16: oneDNN bf16 matmuls on tiles",
    "amx_fp16": "AMX-FP16: mixed-dtype fp8 _scaled_mm goes through oneDNN",
}

# torch operators whose CPU implementation depends on the host's features (CPU_FLAGS) and whose
# checks or results therefore differ between hosts: a CPU-tier claim about one must name the
# hosts it holds on (`when: {cpu_flags: ...}`) or pin the path (turn oneDNN off around the call).
HOST_DISPATCHED_OPS: dict[str, str] = {
    "_scaled_mm": "with oneDNN on, a host with AMX-INT8 (AMX-FP16 for mixed fp8 dtypes) runs "
    "oneDNN's fp8 GEMM, which skips the reference path's scale and layout checks",
    "_int_mm": "oneDNN's int8 GEMM on hosts with VNNI/AMX, a reference loop elsewhere",
    "_weight_int8pack_mm": "oneDNN or a vectorised kernel by host features",
    "_weight_int4pack_mm": "oneDNN or a vectorised kernel by host features",
}

# How a snippet pins a host-dispatched operator to the reference path on every host.
HOST_DISPATCH_PINS: tuple[str, ...] = (
    "torch.backends.mkldnn.flags(enabled=False)",
    "torch.backends.mkldnn.enabled = False",
)


# --------------------------------------------------------------------------- sharing the GPU

DeviceUse = Literal["exclusive", "shared"]
# "exclusive": runs alone on the GPU (it times kernels, profiles them, or reads device-wide memory,
# which another process on the device would distort); "shared": may run beside other shared runs
# (correctness, numerics and compile checks, which another process cannot change).

# --------------------------------------------------------------------------- verdicts of one run

Verdict = Literal["pass", "fail", "skip", "error", "timeout", "killed"]


@dataclass(frozen=True)
class VerdictSpec:
    name: str
    bad: bool  # the run failed: the skill is failing, the command exits 1
    colour: str  # HTML
    style: str  # rich (terminal)
    junit: Literal["pass", "skipped", "failure", "error"]


VERDICT_SPECS: dict[str, VerdictSpec] = _by_name(
    VerdictSpec("pass", False, "#2e9b4f", "green", "pass"),
    VerdictSpec("fail", True, "#d64545", "red", "failure"),
    VerdictSpec("skip", False, "#9aa3ad", "dim", "skipped"),
    VerdictSpec("error", True, "#b03a8a", "magenta", "error"),
    VerdictSpec("timeout", True, "#e08a1e", "yellow", "error"),
    VerdictSpec("killed", True, "#8b1e1e", "red bold", "error"),
)
VERDICTS: tuple[str, ...] = get_args(Verdict)
BAD_VERDICTS: frozenset[str] = frozenset(v for v, s in VERDICT_SPECS.items() if s.bad)
assert tuple(VERDICT_SPECS) == VERDICTS

# --------------------------------------------------------------------------- skill statuses

SkillStatus = Literal[
    "failing", "unverified", "self-reported", "stale-source", "stale-env", "stale-age", "verified"
]
# A PR card is a fact read from git, not a claim to verify: its status is always "mined".
EntryStatus = Literal[SkillStatus, "mined", "draft"]
PR_STATUS = "mined"
# A skill proposed from experience under skills/_drafts/ (kbase/drafts.py): unreviewed, so it is
# "draft" whatever the ledger says, until a person moves it to skills/<name>/.
DRAFT_STATUS = "draft"


@dataclass(frozen=True)
class StatusSpec:
    name: str
    colour: str  # HTML
    style: str  # rich
    icon: str  # Markdown
    stale: bool = False  # one of the stale-* family (`--fail-on stale`)
    demoted: bool = False  # ranked below healthy entries in search results


# THE severity order, worst first: rules pick the first status that has a reason, `stale`
# lists worst first, reports sort by it.
STATUS_SPECS: dict[str, StatusSpec] = _by_name(
    # the latest run on some environment failed
    StatusSpec("failing", "#d64545", "red", "❌", demoted=True),
    # never passed with the current snippet
    StatusSpec("unverified", "#9aa3ad", "dim", "⚪"),
    # passed only in runs nobody can vouch for (unsigned by a trusted runner, or outside the
    # sandbox): shown apart so a reader sees the claim was run, not verified
    StatusSpec("self-reported", "#c9a227", "yellow", "🟡"),
    # a watched upstream path changed after the last pass
    StatusSpec("stale-source", "#8a5cd6", "magenta", "📝", stale=True),
    # no pass on the environment asked about
    StatusSpec("stale-env", "#3b7dd8", "blue", "🔄", stale=True),
    # the last pass or human audit is too old
    StatusSpec("stale-age", "#e0b01e", "yellow", "🕒", stale=True),
    # passed recently, nothing outdates it
    StatusSpec("verified", "#2e9b4f", "green", "✅"),
)
STATUS_ORDER: tuple[str, ...] = get_args(SkillStatus)
ENTRY_STATUSES: tuple[str, ...] = get_args(EntryStatus)
assert tuple(STATUS_SPECS) == STATUS_ORDER


def severity(status: str) -> int:
    """0 for the worst status; unknown statuses sort last."""
    return STATUS_ORDER.index(status) if status in STATUS_ORDER else len(STATUS_ORDER)


# `kbase audit --fail-on LEVEL`: the statuses that make the audit exit 1.
FAIL_LEVELS: dict[str, frozenset[str]] = {
    "failing": frozenset({"failing"}),
    "unverified": frozenset({"failing", "unverified", "self-reported"}),
    "stale": frozenset(
        {"failing", "unverified", "self-reported"} | {n for n, s in STATUS_SPECS.items() if s.stale}
    ),
    "never": frozenset(),
}

# --------------------------------------------------------------------------- search

# hybrid: BM25 and dense ranks fused (the default); bm25: lexical only (exact identifiers and
# error strings); dense: embeddings only (paraphrases)
Mode = Literal["hybrid", "bm25", "dense"]
MODES: tuple[str, ...] = get_args(Mode)

EntryKind = Literal["skill", "pr"]
KINDS: tuple[str, ...] = get_args(EntryKind)
KIND_ALIASES: dict[str, str] = {"skills": "skill", "prs": "pr", "pull-request": "pr", "card": "pr"}

# --------------------------------------------------------------------------- feedback

# what a user says after acting on an entry (kbase/feedback.py: each one's sign and meaning)
FeedbackVerdict = Literal["helpful", "harmful", "outdated"]

# --------------------------------------------------------------------------- PR archive

# a card for a merged PR (pr_archive/<name>/<N>.md) or for a commit pushed without one
# (pr_archive/<name>/commit-<short-sha>.md, pr: null); both index as kind "pr"
CardKind = Literal["pr", "commit"]

# --------------------------------------------------------------------------- tag vocabulary


@functools.cache
def vocabulary() -> dict[str, dict]:
    """Tag vocabulary: canonical values and aliases, loaded once from kbase/data/vocab.yaml."""
    from kbase.data import read_yaml

    raw = read_yaml("vocab.yaml")
    out: dict[str, dict] = {}
    for key, spec in raw.items():
        values = [str(v) for v in spec["values"]]
        aliases = {str(k).lower(): str(v) for k, v in (spec.get("aliases") or {}).items()}
        out[key] = {"values": values, "set": set(values), "aliases": aliases}
    return out


def canonical_value(key: str, value: str) -> str | None:
    """The canonical spelling of `value` under `key`, or None when it is not in the vocabulary."""
    spec = vocabulary().get(key)
    if spec is None:
        return None
    v = str(value).strip()
    if v in spec["set"]:
        return v
    low = v.lower()
    return low if low in spec["set"] else spec["aliases"].get(low)


def canonicalize(key: str, values: list[str]) -> list[str]:
    out: list[str] = []
    for v in values:
        c = canonical_value(key, v)
        if c is None:
            known = ", ".join(vocabulary()[key]["values"])
            raise ValueError(
                f"unknown {key} tag {v!r} (known: {known}; aliases in kbase/data/vocab.yaml)"
            )
        if c not in out:
            out.append(c)
    return out
