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
    """An on_done callback that writes each run to the ledger as soon as it finishes.

    A long audit that is interrupted (Ctrl-C, a CI or device time limit) keeps what it finished.
    """

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
    from kbase.validators.status import _rows_by_skill

    rows = _rows_by_skill(Path(root).resolve())
    out: list[Problem] = []
    for s in skills:
        literals = list(getattr(s.meta, "literal_triggers", []) or [])
        mine = [r for r in rows.get(s.name, []) if r.get("snippet_sha256") == s.snippet_sha256()]
        if not literals or not mine:
            continue
        for lit in literals:
            runs = [r for r in mine if literal_expected(s.meta, lit, r.get("fingerprint"))]
            if runs and not any(lit in (r.get("literals_seen") or []) for r in runs):
                idx = s.meta.trigger.index(lit) if lit in s.meta.trigger else 0
                out.append(
                    Problem(
                        path=s.path,
                        line=s.doc.line_of(("trigger", idx)),
                        field="trigger",
                        message=f"literal trigger {lit!r} never appeared in the output of a "
                        f"counted run ({len(runs)} run(s) of this snippet)",
                    )
                )
    return out


def exit_code(result: Any, fail_on: str) -> int:
    """1 when something at or above the --fail-on level is present (load problems count
    as failing).
    """
    if fail_on == "never":
        return 0
    statuses = {j["status"] for j in result.judgements}
    return 1 if (statuses & FAIL_LEVELS[fail_on] or result.problems) else 0


def write_reports(
    root: Path,
    result: Any,
    skills: list,
    now: dt.datetime,
    fingerprint: dict,
    *,
    markdown: Path | None = None,
    html: Path | None = None,
) -> None:
    from kbase.validators.report import html_report, markdown_report

    r = result
    if markdown:
        generated = now.isoformat(timespec="minutes")
        md = markdown_report(
            r.judgements,
            r.outcomes,
            r.problems,
            generated=generated,
            fingerprint=fingerprint,
            isolation_note=r.isolation_note,
        )
        _write(markdown, md)
    if html:
        wanted = {s.name for s in skills}
        rows: dict[str, list[dict]] = {}
        for row in read_ledger(root, strict=False).rows:
            if row["skill"] in wanted:
                rows.setdefault(row["skill"], []).append(row)
        page = html_report(
            r.judgements,
            rows,
            {s.name: s.snippet_sha256() for s in skills},
            {s.name: s.meta.audit.max_age_days for s in skills},
            now=now,
            fingerprint=fingerprint,
            isolation_note=r.isolation_note,
            problems=r.problems,
        )
        _write(html, page)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
