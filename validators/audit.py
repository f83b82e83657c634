"""What an audit adds to runs (KnowledgeBase.audit): each run recorded as it ends, literal
triggers never seen, the exit code and the reports."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kbase.validators.ledger import append_rows, read_ledger, row_from_outcome, seal
from kbase.validators.runner import RunOutcome

from kbase.closed_sets import FAIL_LEVELS
from kbase.schema import LedgerRow, Problem


class Recorder:
    """An on_done callback that writes each run to the ledger as soon as it finishes: a long audit
    that is interrupted (Ctrl-C, a CI or device time limit) keeps what it finished."""

    def __init__(self, root: Path, then: Callable[[RunOutcome], None] | None = None):
        from kbase.validators.signing import signer_from_env, trusted_keys

        self.root, self.then, self.count = root, then, 0
        signer = signer_from_env()  # loaded now, before any snippet runs; a bad key stops here
        # With trusted keys configured, an unsigned row could only ever be self-reported: it
        # would make `kbase ledger verify` fail, so it is not written.
        self.enabled = signer is not None or not trusted_keys(root).configured
        self.note: str | None = None
        if not self.enabled:
            self.note = "runs not recorded: ledger/trusted-keys/ is configured and "
            self.note += "KBASE_SIGNING_KEY is not set (unsigned rows would only be self-reported)"

    def __call__(self, outcome: RunOutcome) -> None:
        if self.enabled and outcome.executed:  # skips decided up front are not runs
            row = row_from_outcome(outcome)
            LedgerRow.model_validate(row)  # a malformed row must fail here, not in every reader
            self.count += append_rows(self.root, [seal(row)])
        if self.then:
            self.then(outcome)


def unseen_literals(root: Path, skills: list) -> list[Problem]:
    """A literal trigger that no counted run of the current snippet printed, on any tier."""
    from kbase.validators.claims import literal_expected
    from kbase.validators.status import _ledger_split

    rows = _ledger_split(Path(root).resolve())[0]
    out: list[Problem] = []
    for s in skills:
        mine = [r for r in rows.get(s.name, []) if r.get("snippet_sha256") == s.snippet_sha256()]
        for lit in getattr(s.meta, "literal_triggers", []) or []:
            runs = [r for r in mine if literal_expected(s.meta, lit, r.get("fingerprint"))]
            if runs and not any(lit in (r.get("literals_seen") or []) for r in runs):
                idx = s.meta.trigger.index(lit) if lit in s.meta.trigger else 0
                msg = f"literal trigger {lit!r} never appeared in the output of a counted run "
                msg += f"({len(runs)} run(s) of this snippet)"
                line = s.doc.line_of(("trigger", idx))
                out.append(Problem(path=s.path, line=line, field="trigger", message=msg))
    return out


def exit_code(result: Any, fail_on: str) -> int:
    """1 when something at or above the --fail-on level is present (load problems count too)."""
    if fail_on == "never":
        return 0
    statuses = {j["status"] for j in result.judgements}
    return 1 if (statuses & FAIL_LEVELS[fail_on] or result.problems) else 0


def write_reports(
    root: Path,
    rep: Any,
    skills: list,
    now: dt.datetime,
    fingerprint: dict,
    *,
    markdown: Path | None = None,
    html: Path | None = None,
) -> None:
    from kbase.validators.report import html_report, markdown_report

    if markdown:
        stamp = now.isoformat(timespec="minutes")
        _write(markdown, markdown_report(rep, generated=stamp, fingerprint=fingerprint))
    if html:
        rows: dict[str, list[dict]] = {s.name: [] for s in skills}
        for row in read_ledger(root, strict=False).rows:
            rows.get(row["skill"], []).append(row)
        shas = {s.name: s.snippet_sha256() for s in skills}
        ages = {s.name: s.meta.audit.max_age_days for s in skills}
        kw = {"fingerprint": fingerprint, "isolation_note": rep.isolation_note}
        page = html_report(rep.judgements, rows, shas, ages, now=now, problems=rep.problems, **kw)
        _write(html, page)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
