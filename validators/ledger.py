"""The verdict ledger: ledger/verifications.jsonl, append-only, one sorted-key JSON object per line
(one line per run keeps branches mergeable: CONTRIBUTING.md, "The ledger"). Lines are ASCII
(non-ASCII escaped): a snippet's output in a row may hold U+2028 or U+0085, which str.splitlines()
and other readers take for line breaks. Readers split on "\n" only and report a line that is not
UTF-8, not JSON or not a row as `path:line`, never a traceback."""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError

from kbase.errors import InvalidArgument, KbaseError, ProblemsError

if TYPE_CHECKING:
    from kbase.validators.signing import TrustedKeys

    from kbase.schema import Problem

LEDGER_DIR = "ledger"
LEDGER_FILE = "verifications.jsonl"
SHOWN = f"{LEDGER_DIR}/{LEDGER_FILE}"
STDERR_TAIL = 1500


class LedgerError(KbaseError, ValueError):
    def __init__(self, path: str, line: int, message: str, field: str | None = None):
        self.path, self.line, self.field, self.message = path, line, field, message
        super().__init__(f"{path}:{line}: " + (f"[{field}] {message}" if field else message))

    def problem(self) -> Problem:
        from kbase.schema import Problem

        return Problem(path=self.path, line=self.line, field=self.field, message=self.message)


def ledger_path(root: Path) -> Path:
    return root / LEDGER_DIR / LEDGER_FILE


def row_from_outcome(o) -> dict:
    """A ledger row for a RunOutcome that ran (skips decided up front are not runs)."""
    kept = ("skill", "snippet_sha256", "tier", "verdict", "line", "fingerprint", "isolated")
    row = {k: getattr(o, k) for k in (*kept, "limits", "claims", "literals_seen", "at")}
    row["duration_s"] = round(o.duration_s, 3)
    return {**row, "message": o.message[:300], "stderr_tail": o.output_tail[-STDERR_TAIL:]}


def canonical(row: dict) -> str:
    """The one serialisation of a row: what is written, compared and (without `sig`) signed."""
    return json.dumps(row, sort_keys=True, ensure_ascii=True, separators=(",", ":"))


def seal(row: dict) -> dict:
    """Sign the row with KBASE_SIGNING_KEY when one is configured; otherwise return it as is."""
    from kbase.validators.signing import signer_from_env

    signer = signer_from_env()
    return signer.sign(row) if signer else row


def validate_row(row: object, path: str, line: int) -> dict:
    if not isinstance(row, dict):
        raise LedgerError(path, line, "a ledger line must be a JSON object")
    from kbase.schema import LedgerRow

    try:
        LedgerRow.model_validate(row)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        missing = [
            str(e["loc"][0]) for e in errors if e["type"] == "missing" and len(e["loc"]) == 1
        ]
        if missing:
            raise LedgerError(path, line, f"missing field(s): {', '.join(missing)}") from None
        first = errors[0]
        where = ".".join(str(p) for p in first["loc"][1:])
        got = f"{where}: " if where else ""
        raise LedgerError(path, line, f"{got}{first['msg']}", field=str(first["loc"][0])) from None
    return row


def parse_line(raw: bytes, shown: str, n: int) -> dict | LedgerError:
    """One ledger line's row, or the LedgerError that names it (`shown:n`)."""
    try:
        return validate_row(json.loads(raw.decode("utf-8")), shown, n)
    except UnicodeDecodeError as exc:
        return LedgerError(shown, n, f"not valid UTF-8 (byte {exc.start + 1} of the line)")
    except json.JSONDecodeError as exc:
        return LedgerError(shown, n, f"not valid JSON ({exc.msg} at column {exc.colno})")
    except RecursionError:
        return LedgerError(shown, n, "not a ledger row (nested too deeply)")
    except LedgerError as err:
        return err


def parse_lines(data: bytes, shown: str) -> Iterator[tuple[int, dict | LedgerError]]:
    """(line number, its row or the LedgerError naming it) for each non-blank line of a ledger."""
    for n, raw in enumerate(data.split(b"\n"), start=1):
        if raw.strip():
            yield n, parse_line(raw, shown, n)


def append_rows(root: Path, rows: Iterable[dict]) -> int:
    """Append under an exclusive lock, in one write so parallel appenders never interleave."""
    rows = list(rows)
    if not rows:
        return 0
    path = ledger_path(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = "".join(canonical(r) + "\n" for r in rows)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # a previous writer killed mid-line would glue our first row onto its fragment
        if size := os.fstat(fd).st_size:
            with open(path, "rb") as fh:
                fh.seek(size - 1)
                if fh.read(1) != b"\n":
                    data = "\n" + data
        os.write(fd, data.encode("utf-8"))
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
    return len(rows)


@dataclass
class LedgerRead:
    rows: list[dict]
    problems: list[LedgerError]


def _data(root: Path) -> bytes:
    path = ledger_path(root)
    return path.read_bytes() if path.exists() else b""


def read_ledger(root: Path, *, strict: bool = True) -> LedgerRead:
    """All rows in file order. strict: the first bad line raises; else bad lines are collected."""
    return _read(_data(root), SHOWN, strict)


def _read(data: bytes, shown: str, strict: bool) -> LedgerRead:
    read = LedgerRead([], [])
    for _, got in parse_lines(data, shown):
        if isinstance(got, LedgerError):
            if strict:
                raise got
            read.problems.append(got)
        else:
            read.rows.append(got)
    return read


def merge_ledger(root: Path, other: Path) -> tuple[int, int]:
    """Append the rows of another copy of the ledger (e.g. from the GPU box) that ours lacks:
    (added, already present). Every row of `other` is validated first, so a bad file adds nothing.
    Rows are copied signatures included: re-serialising a row keeps its signed payload."""
    try:
        data = Path(other).read_bytes()
    except OSError as exc:
        raise LedgerError(str(other), 0, exc.strerror or str(exc)) from None
    incoming = _read(data, str(other), True).rows
    have = {canonical(r) for r in read_ledger(root, strict=False).rows}
    # keyed on the canonical line: a row twice in `other` is added once
    new = list({canonical(r): r for r in incoming if canonical(r) not in have}.values())
    append_rows(root, new)
    return len(new), len(incoming) - len(new)


SELF_REPORTED_FILE = "self-reported.jsonl"


@dataclass
class LedgerCheck:
    rows: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # trusted / self-reported / bad-signature
    trusted_keys: list[str] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {**asdict(self), "problems": [p.model_dump() for p in self.problems]}


def _scan(root: Path):
    from kbase.validators.signing import trusted_keys

    keys = trusted_keys(root)
    problems: list[Problem] = []
    states: list[tuple[int, dict, str]] = []
    for n, got in parse_lines(_data(root), SHOWN):
        if isinstance(got, LedgerError):
            problems.append(got.problem())
        else:
            states.append((n, got, keys.check(got)))
    return keys, problems, states


def sig_problem(keys: TrustedKeys, state: str, row: dict, untrusted: str) -> str | None:
    """What is wrong with a row's signature (`state`, from keys.check): one that does not verify,
    or, where keys are configured, `untrusted` for a row no trusted key signed; else None."""
    from kbase.validators.signing import BAD_SIGNATURE, TRUSTED

    if state == BAD_SIGNATURE:
        return f"the signature of this {row['skill']} row does not verify"
    return untrusted if keys.configured and state != TRUSTED else None


def verify_ledger(root: Path) -> LedgerCheck:
    """Every row parsed and its signature checked; problems for bad rows, bad signatures and (when
    trusted keys are configured) rows no trusted key signed."""
    from kbase.validators.signing import BAD_SIGNATURE, TRUSTED

    from kbase.schema import Problem

    keys, problems, states = _scan(root)
    problems += [Problem(path=f"{LEDGER_DIR}/trusted-keys", message=p) for p in keys.problems]
    counts = {TRUSTED: 0, "self-reported": 0, BAD_SIGNATURE: 0}
    for n, row, state in states:
        counts[state] = counts.get(state, 0) + 1
        untrusted = f"{row['skill']} row is self-reported (not signed by a trusted key)"
        if why := sig_problem(keys, state, row, untrusted):
            problems.append(Problem(path=SHOWN, line=n, field="sig", message=why))
    return LedgerCheck(len(states), counts, sorted(keys.names.values()), problems)


def quarantine(root: Path) -> tuple[int, int, str]:
    """Move every row no trusted key signed to ledger/self-reported.jsonl: (kept, moved, file).
    For the switch to a signed ledger and after merging branches that recorded unsigned runs:
    the moved rows stay in the repository as history and never count."""
    from kbase.validators.signing import TRUSTED

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
