"""The validators' part of `KnowledgeBase` (a mixin of kbase.api): lint, verify, audit, check,
new, merge-ledger, trust. Progress goes to callbacks; printing is the adapter's business."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kbase.api_search import attrs
from kbase.closed_sets import BAD_VERDICTS, FAIL_LEVELS, TIER_CHOICES
from kbase.errors import InvalidArgument, NotFound

if TYPE_CHECKING:
    from kbase.schema import Problem

OnDone = Callable[[Any], None]
OnPlan = Callable[[int], None]


@dataclass
class LintReport:
    checked: int
    problems: list[Problem]

    def as_dict(self) -> dict[str, Any]:
        return {"checked": self.checked, "problems": [p.model_dump() for p in self.problems]}


# What installs the tools a tier needs (CONTRIBUTING.md says the same).
NEEDS = {
    "triton is not installed": "pip install 'gpu-kbase[verify]' (triton and torch)",
    "nvcc is not on PATH": "the CUDA toolkit (nvcc)",
}


def nothing_ran(outcomes: list[Any], skill_paths: dict[str, str]) -> list[Any]:
    """A problem for each skill whose every planned run was skipped: its snippet was not run,
    so a green check would be a lie (issue #27). The message names what would run it."""
    from kbase.schema import Problem

    runs: dict[str, list[Any]] = {}
    for o in outcomes:
        runs.setdefault(o.skill, []).append(o)
    out = []
    for name, rows in runs.items():
        if any(o.verdict != "skip" for o in rows):
            continue
        why = "; ".join(dict.fromkeys(f"{o.tier}: {o.message}" for o in rows))
        fix = [NEEDS[k] for k in NEEDS if any(k in o.message for o in rows)]
        hint = f"; install {' or '.join(fix)}" if fix else ""
        out.append(
            Problem(
                path=skill_paths.get(name, name),
                field="verification",
                code="nothing-ran",
                message=f"no tier ran the snippet ({why}){hint}",
            )
        )
    return out


_JSON_FIELDS = {
    "verify": "results problems network_isolation isolation_note recorded",
    "audit": "skills runs problems recorded network_isolation isolation_note releases",
    "check": "base skills problems results",
}


@dataclass
class RunReport:
    """What verify, check and audit ran and found. `outcomes` are validators.runner.RunOutcome."""

    outcomes: list[Any] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    skill_paths: dict[str, str] = field(default_factory=dict)
    recorded: int = 0
    isolation_note: str | None = None
    ran: bool = True
    base: str | None = None  # check --changed: the revision diffed against
    judgements: list[dict[str, Any]] = field(default_factory=list)  # audit only
    exit_code: int = 0
    notes: list[str] = field(default_factory=list)  # e.g. why runs were not recorded
    # audit only: skills whose CPU runs differ for the worse between two Triton releases
    releases: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(self.problems) or any(o.verdict in BAD_VERDICTS for o in self.outcomes)

    def as_json(self, command: str) -> dict[str, Any]:
        """`kbase verify|audit|check --json`."""
        runs = [o.result_dict() for o in self.outcomes]
        every = {
            "base": self.base,
            "skills": self.judgements if command == "audit" else list(self.skill_paths),
            "results": runs,
            "runs": runs,
            "problems": [p.model_dump() for p in self.problems],
            "recorded": self.recorded,
            "network_isolation": self.isolation_note is None if self.ran else None,
            "isolation_note": self.isolation_note,
            "releases": self.releases,
        }
        return {k: every[k] for k in _JSON_FIELDS[command].split()}


@dataclass
class RunOptions:
    tier: str = "auto"
    workers: int = 1
    timeout_s: int | None = None
    memory_mb: int | None = None
    isolate: bool = True

    def __post_init__(self) -> None:
        if self.tier not in TIER_CHOICES:
            raise InvalidArgument(
                f"--tier must be one of {', '.join(TIER_CHOICES)}, not {self.tier!r}", "tier"
            )


def _write_junit(rep: RunReport, path: Path | None, suite: str) -> None:
    if path is None:
        return
    from kbase.validators.report import junit_xml

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(junit_xml(rep.outcomes, rep.problems, rep.skill_paths, suite), encoding="utf-8")


class ValidateAPI:
    if TYPE_CHECKING:  # provided by KnowledgeBase
        root: Path

    # ------------------------------------------------------------------ lint
    def lint(self, paths: Sequence[Path] | None = None) -> LintReport:
        """Every problem in the given SKILL.md files or skill folders (default: all skills)."""
        from kbase.ingest.skills import find_skill_files, lint_paths

        targets = [Path(p).resolve() for p in paths] if paths else find_skill_files(self.root)
        return LintReport(checked=len(targets), problems=lint_paths(targets, self.root))

    # ------------------------------------------------------------------ runs
    def _run(
        self,
        skills: list[Any],
        problems: list[Problem],
        opts: RunOptions | None,
        record: bool,
        on_plan: OnPlan | None,
        on_done: OnDone | None,
        all_skipped_fails: bool,
    ) -> RunReport:
        """Run the skills' snippets (verify, check); with `record`, each run goes to the ledger.
        `all_skipped_fails`: a skill none of whose runs ran is a problem (an asked-for tier)."""
        from kbase.validators.report import Recorder
        from kbase.validators.runner import RunSettings, isolation_note, plan_skill, verify_skills

        opts = opts or RunOptions()
        settings = RunSettings(
            **attrs(opts, "tier workers timeout_s memory_mb"),
            unsafe_no_sandbox=not opts.isolate,
            root=self.root,
        )
        if on_plan:
            on_plan(sum(len(plan_skill(s, opts.tier)) for s in skills))
        recorder = Recorder(self.root, on_done) if record else None
        outcomes = verify_skills(skills, settings, recorder or on_done)
        paths = {s.name: s.path for s in skills}
        if all_skipped_fails:
            problems = problems + nothing_ran(outcomes, paths)
        return RunReport(
            outcomes=outcomes,
            problems=problems,
            skill_paths=paths,
            recorded=recorder.count if recorder else 0,
            isolation_note=isolation_note(settings, outcomes),
            notes=[recorder.note] if recorder and recorder.note else [],
        )

    def verify(
        self,
        names: Sequence[str] | None = None,
        opts: RunOptions | None = None,
        *,
        record: bool = True,
        junit: Path | None = None,
        on_plan: OnPlan | None = None,
        on_done: OnDone | None = None,
    ) -> RunReport:
        """Run skills' snippets in the sandbox; with `record`, each run goes to the ledger."""
        from kbase.ingest.skills import load_skills

        opts = opts or RunOptions()
        skills, problems = load_skills(self.root, names)
        # an asked-for tier that nothing could run is a failure
        rep = self._run(skills, problems, opts, record, on_plan, on_done, opts.tier != "auto")
        _write_junit(rep, junit, "kbase-verify")
        return rep

    def audit(
        self,
        names: Sequence[str] | None = None,
        opts: RunOptions | None = None,
        *,
        run: bool = True,
        fail_on: str = "failing",
        junit: Path | None = None,
        markdown: Path | None = None,
        html: Path | None = None,
        on_plan: OnPlan | None = None,
        on_done: OnDone | None = None,
    ) -> RunReport:
        """Run what this machine can, append to the ledger, judge every skill, write reports."""
        import datetime as dt

        from kbase.ingest.skills import load_skills
        from kbase.validators.claim_views import release_diffs
        from kbase.validators.fingerprint import fingerprint
        from kbase.validators.ledger import read_ledger
        from kbase.validators.report import exit_code, unseen_literals, write_reports
        from kbase.validators.status import judgements

        if fail_on not in FAIL_LEVELS:
            raise InvalidArgument(
                f"--fail-on must be one of {', '.join(FAIL_LEVELS)}, not {fail_on!r}", "fail_on"
            )
        read_ledger(self.root, strict=True)  # a corrupt ledger is reported before any work
        skills, problems = load_skills(self.root, names)
        if run:
            rep = self._run(skills, problems, opts, True, on_plan, on_done, False)
        else:
            paths = {s.name: s.path for s in skills}
            rep = RunReport(problems=problems, skill_paths=paths, ran=False)
        # judged after the runs, which the ledger now holds, for this machine
        now, here = dt.datetime.now(dt.UTC), fingerprint("gpu", self.root)
        judged = judgements(self.root, now=now, env=here, skills=skills)
        rep.judgements = [judged[s.name].model_dump() for s in skills]
        rep.problems += unseen_literals(self.root, skills)
        _write_junit(rep, junit, "kbase-audit")
        write_reports(self.root, rep, skills, now, here, markdown=markdown, html=html)
        rep.exit_code = exit_code(rep, fail_on)
        rep.releases = release_diffs(self.root, skills)
        return rep

    def check(
        self,
        names: Sequence[str] | None = None,
        *,
        changed: bool = False,
        base: str | None = None,
        opts: RunOptions | None = None,
        record: bool = False,
        junit: Path | None = None,
        on_plan: OnPlan | None = None,
        on_done: OnDone | None = None,
    ) -> RunReport:
        """Lint and verify the named skills, plus (with `changed`) those changed since `base`."""
        from kbase.ingest.skills import lint_paths, load_skills, skill_file
        from kbase.validators.changes import changed_skills, ledger_change_problems

        refs = list(names or [])
        used_base = None
        ledger_problems: list[Problem] = []
        if changed:
            found, used_base = changed_skills(self.root, base)
            # the ledger is append-only and only trusted runners may add to it
            ledger_problems, _ = ledger_change_problems(self.root, base)
            refs += [n for n in found if n not in refs]
        elif not refs:
            raise InvalidArgument("name skills to check, or pass --changed", "names")
        if not refs:
            return RunReport(base=used_base, ran=False, problems=ledger_problems)
        files = [skill_file(self.root, ref) for ref in refs]
        skills, _ = load_skills(self.root, [str(f) for f in files])
        problems = ledger_problems + lint_paths(files, self.root)
        rep = self._run(skills, problems, opts, record, on_plan, on_done, True)
        rep.base = used_base
        _write_junit(rep, junit, "kbase-check")
        return rep

    # ------------------------------------------------------------------ files
    def new_skill(self, name: str, force: bool = False) -> Path:
        """Scaffold skills/NAME/SKILL.md; returns its path relative to the root."""
        from kbase.validators.scaffold import new_skill

        return new_skill(self.root, name, force=force).relative_to(self.root)

    def merge_ledger(self, other: Path) -> tuple[int, int]:
        """Append the runs `other` recorded that this ledger lacks: (added, already present)."""
        from kbase.validators.ledger import merge_ledger

        if not Path(other).is_file():
            raise NotFound(f"{other}: no such file")
        return merge_ledger(self.root, Path(other))

    # ------------------------------------------------------------------ trust
    @staticmethod
    def new_keypair(path: Path, *, comment: str = "", force: bool = False) -> dict[str, Any]:
        """An ed25519 key pair for signing rows; needs no knowledge base."""
        from kbase.validators.signing import keygen

        priv, pub, kid = keygen(Path(path), comment=comment, force=force)
        return {"private": str(priv), "public": str(pub), "key_id": kid, "trusted": None}

    def keygen(self, path: Path, *, comment: str = "", force: bool = False) -> dict[str, Any]:
        """An ed25519 key pair for signing rows, its public key joining ledger/trusted-keys/."""
        import shutil

        info = self.new_keypair(Path(path), comment=comment, force=force)
        pub = Path(info["public"])
        dest = self.root / "ledger" / "trusted-keys" / pub.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(pub, dest)
        return {**info, "trusted": str(dest.relative_to(self.root))}

    def ledger_verify(self) -> Any:
        """validators.ledger.LedgerCheck: every row valid and signed as trust requires."""
        from kbase.validators.ledger import verify_ledger

        return verify_ledger(self.root)

    def ledger_quarantine(self) -> tuple[int, int, str]:
        """Move rows no trusted key signed out of the ledger: (kept, moved, where to)."""
        from kbase.validators.ledger import quarantine

        return quarantine(self.root)

    def export(self, dest: Path, **kw: Any) -> Any:
        """Agent-Skills folders under dest (kbase.serve.export.export_agent_skills)."""
        from kbase.serve.export import export_agent_skills

        return export_agent_skills(self, dest, **kw)

    def skills(self) -> tuple[list[Any], list[str]]:
        """Every skill under skills/ loaded, and `name: first problem` for each that does not."""
        from kbase.ingest.markdown import DocumentError
        from kbase.ingest.skills import find_skill_files, load_skill

        skills, skipped = [], []
        for f in find_skill_files(self.root):
            try:
                skills.append(load_skill(f, self.root))
            except DocumentError as de:
                skipped.append(
                    f"{f.parent.name}: {de.problems[0] if de.problems else 'does not load'}"
                )
        return skills, skipped

    @staticmethod
    def snippet_files(skill: Any) -> dict[str, str]:
        """A skill's verification snippet as the files the sandbox writes (file name -> text)."""
        from kbase.validators.snippets import layout_blocks

        return {f.name: f.text for f in layout_blocks(skill.snippet_blocks()).files}
