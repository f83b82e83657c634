"""Whole-ledger checks: every row valid and, when keys are configured, signed by a trusted key."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from kbase.validators.ledger import (
    LEDGER_DIR,
    LEDGER_FILE,
    LedgerError,
    canonical,
    ledger_path,
    parse_lines,
)
from kbase.validators.signing import BAD_SIGNATURE, TRUSTED, TrustedKeys, trusted_keys

from kbase.errors import InvalidArgument, ProblemsError
from kbase.schema import Problem

SHOWN = f"{LEDGER_DIR}/{LEDGER_FILE}"
SELF_REPORTED_FILE = "self-reported.jsonl"


@dataclass
class LedgerCheck:
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # trusted / self-reported / bad-signature
    trusted_keys: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**dataclasses.asdict(self), "problems": [p.model_dump() for p in self.problems]}


def _scan(root: Path):
    keys = trusted_keys(root)
    path = ledger_path(root)
    problems: list[Problem] = []
    states: list[tuple[int, dict, str]] = []
    data = path.read_bytes() if path.exists() else b""
    for n, got in parse_lines(data, SHOWN):
        if isinstance(got, LedgerError):
            problems.append(got.problem())
        else:
            states.append((n, got, keys.check(got)))
    return keys, problems, states


def sig_problem(keys: TrustedKeys, state: str, row: dict, untrusted: str) -> str | None:
    """What is wrong with a row's signature (`state`, from keys.check): one that does not verify,
    or, where keys are configured, `untrusted` for a row no trusted key signed; else None."""
    if state == BAD_SIGNATURE:
        return f"the signature of this {row['skill']} row does not verify"
    return untrusted if keys.configured and state != TRUSTED else None


def verify_ledger(root: Path) -> LedgerCheck:
    """Every row parsed and its signature checked; problems for bad rows, bad signatures and (when
    trusted keys are configured) rows no trusted key signed."""
    keys, problems, states = _scan(root)
    problems += [Problem(path=f"{LEDGER_DIR}/trusted-keys", message=p) for p in keys.problems]
    counts = {TRUSTED: 0, "self-reported": 0, BAD_SIGNATURE: 0}
    for n, row, state in states:
        counts[state] = counts.get(state, 0) + 1
        why = sig_problem(
            keys, state, row, f"{row['skill']} row is self-reported (not signed by a trusted key)"
        )
        if why:
            problems.append(Problem(path=SHOWN, line=n, field="sig", message=why))
    return LedgerCheck(len(states), counts, sorted(keys.names.values()), problems)


def quarantine(root: Path) -> tuple[int, int, str]:
    """Move every row no trusted key signed to ledger/self-reported.jsonl: (kept, moved, file).

    For the switch to a signed ledger and after merging branches that recorded unsigned runs:
    the moved rows stay in the repository as history and never count.
    """
    keys, problems, states = _scan(root)
    if not keys.keys:
        raise InvalidArgument("ledger/trusted-keys/ holds no key: every row would be moved", "root")
    if problems:
        raise ProblemsError(problems)
    keep = [row for _, row, s in states if s == TRUSTED]
    move = [row for _, row, s in states if s != TRUSTED]
    side = Path(root) / LEDGER_DIR / SELF_REPORTED_FILE
    with open(side, "a", encoding="utf-8") as fh:
        fh.writelines(canonical(row) + "\n" for row in move)
    tmp = ledger_path(root).with_suffix(".jsonl.tmp")
    tmp.write_text("".join(canonical(row) + "\n" for row in keep), encoding="utf-8")
    tmp.replace(ledger_path(root))
    return len(keep), len(move), f"{LEDGER_DIR}/{SELF_REPORTED_FILE}"
