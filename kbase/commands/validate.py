"""Validator sub-commands: verify, audit, new, check.

Only typer/rich at module level: this module is imported by every `kbase` invocation, including
on the GPU machine where the search stack (chromadb, sentence-transformers) is not installed.
"""

from __future__ import annotations

from pathlib import Path

import typer

from kbase.commands.common import (
    JsonOpt,
    RootOpt,
    console,
    err_console,
    fail,
    print_json,
    root_path,
)

VERDICT_STYLE = {
    "pass": "green",
    "fail": "red",
    "error": "magenta",
    "timeout": "yellow",
    "killed": "red bold",
    "skip": "dim",
}
STATUS_STYLE = {
    "verified": "green",
    "failing": "red",
    "unverified": "dim",
    "stale-age": "yellow",
    "stale-env": "blue",
    "stale-source": "magenta",
}

TierOpt = typer.Option("auto", "--tier", help="auto | cpu-interpret | cpu-compile | gpu")
WorkersOpt = typer.Option(1, "-j", "--workers", min=1, max=64, help="snippets run in parallel")
TimeoutOpt = typer.Option(
    None, "--timeout", min=1, help="override every skill's verification.timeout_s"
)
MemoryOpt = typer.Option(
    None,
    "--memory-mb",
    min=0,
    help="memory limit per run in MiB (CPU tiers: address space, default 8192; gpu: data, default 32768; 0: none)",
)
IsolateOpt = typer.Option(
    True,
    "--sandbox/--unsafe-no-sandbox",
    help="run snippets in the bubblewrap sandbox (default); without it rows never verify",
)
JunitOpt = typer.Option(None, "--junit", help="write a JUnit XML report here")


def _check_tier(tier: str) -> None:
    from kbase.validators.tiers import TIER_CHOICES

    if tier not in TIER_CHOICES:
        raise fail(f"--tier must be one of {', '.join(TIER_CHOICES)}, not {tier!r}")


def _load(root: Path, names: list[str] | None):
    from kbase.validators.select import UnknownSkill, load_skills

    try:
        return load_skills(root, names)
    except UnknownSkill as exc:
        raise fail(str(exc)) from None


def _settings(
    root: Path,
    tier: str,
    workers: int,
    timeout: int | None,
    memory: int | None,
    isolate: bool,
):
    from kbase.validators.runner import RunSettings

    return RunSettings(
        tier=tier,
        workers=workers,
        timeout_s=timeout,
        memory_mb=memory,
        unsafe_no_sandbox=not isolate,
        root=root,
    )


def _run_with_progress(skills, settings, run):
    """Run `run(on_done)` with a progress bar on stderr sized by the planned (skill, tier) pairs."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kbase.validators.runner import plan_skill

    total = sum(len(plan_skill(s, settings.tier)) for s in skills)
    with Progress(
        TextColumn("[bold]verify"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
    ) as progress:
        task = progress.add_task("", total=total)

        def done(o) -> None:
            progress.update(task, advance=1, description=f"{o.skill} [{o.tier}] {o.verdict}")

        from kbase.validators.sandbox import SandboxUnavailable
        from kbase.validators.signing import SigningError

        try:
            return run(done)
        except SigningError as exc:
            raise fail(f"cannot sign ledger rows: {exc}") from None
        except SandboxUnavailable as exc:
            raise fail(
                f"refusing to run snippets without the sandbox: {exc}. Install bubblewrap "
                "(apt-get install bubblewrap) or pass --unsafe-no-sandbox (such runs never verify)"
            ) from None


def _runs_table(outcomes, paths: dict[str, str]) -> None:
    from rich.table import Table

    table = Table(title="verification runs", show_lines=False)
    for col in ("skill", "tier", "verdict", "s", "where", "message"):
        table.add_column(col, overflow="fold")
    for o in outcomes:
        where = f"{paths.get(o.skill, o.skill)}:{o.line}" if o.line else ""
        style = VERDICT_STYLE.get(o.verdict, "")
        table.add_row(
            o.skill,
            o.tier,
            f"[{style}]{o.verdict}[/]",
            f"{o.duration_s:.1f}",
            where,
            o.message[:160],
        )
    console.print(table)


def _bad(outcomes) -> bool:
    return any(o.verdict in ("fail", "error", "timeout", "killed") for o in outcomes)


def verify(
    names: list[str] = typer.Argument(None, help="skill names or paths (default: all)"),
    tier: str = TierOpt,
    workers: int = WorkersOpt,
    timeout: int | None = TimeoutOpt,
    memory_mb: int | None = MemoryOpt,
    isolate: bool = IsolateOpt,
    record: bool = typer.Option(
        True, "--record/--no-record", help="append the runs to ledger/verifications.jsonl"
    ),
    junit: Path | None = JunitOpt,
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run skills' verification snippets in the sandbox; exit 1 when any run fails."""
    from kbase.validators.audit import Recorder
    from kbase.validators.report import junit_xml
    from kbase.validators.runner import isolation_note, verify_skills

    _check_tier(tier)
    r = root_path(root)
    skills, problems = _load(r, names)
    settings = _settings(r, tier, workers, timeout, memory_mb, isolate)
    recorders: list[Recorder] = []

    def run(done):
        if record:
            recorders.append(Recorder(r, done))
            done = recorders[0]
        return verify_skills(skills, settings, done)

    outcomes = _run_with_progress(skills, settings, run)
    recorded = recorders[0].count if recorders else 0
    note = isolation_note(settings, outcomes)
    paths = {s.name: s.path for s in skills}
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(outcomes, problems, paths, "kbase-verify"), encoding="utf-8")
    if as_json:
        print_json(
            {
                "results": [o.result_dict() for o in outcomes],
                "problems": problems,
                "network_isolation": note is None,
                "isolation_note": note,
                "recorded": recorded,
            }
        )
    else:
        _runs_table(outcomes, paths)
        for p in problems:
            typer.echo(p)
        if note:
            err_console.print(f"[yellow]warning:[/yellow] {note}")
        if recorders and recorders[0].note:
            err_console.print(f"[yellow]note:[/yellow] {recorders[0].note}")
        err_console.print(f"{len(outcomes)} run(s), {recorded} recorded in the ledger")
    if problems or _bad(outcomes):
        raise typer.Exit(1)


def audit(
    names: list[str] = typer.Argument(None, help="skill names or paths (default: all)"),
    tier: str = TierOpt,
    workers: int = WorkersOpt,
    timeout: int | None = TimeoutOpt,
    memory_mb: int | None = MemoryOpt,
    isolate: bool = IsolateOpt,
    no_run: bool = typer.Option(False, "--no-run", help="judge from the ledger only; run nothing"),
    junit: Path | None = JunitOpt,
    markdown: Path | None = typer.Option(None, "--markdown", help="write a Markdown report here"),
    html: Path | None = typer.Option(
        None, "--html", help="write a self-contained HTML report here"
    ),
    fail_on: str = typer.Option(
        "failing", "--fail-on", help="failing | unverified | stale | never"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run what this machine can, append to the ledger, and report every skill's status."""
    from rich.table import Table

    from kbase.validators.audit import FAIL_LEVELS, exit_code, run_audit, write_reports
    from kbase.validators.ledger import LedgerError, read_ledger

    _check_tier(tier)
    if fail_on not in FAIL_LEVELS:
        raise fail(f"--fail-on must be one of {', '.join(FAIL_LEVELS)}, not {fail_on!r}")
    r = root_path(root)
    try:
        read_ledger(r, strict=True)  # a corrupt ledger is reported by line before any work is done
    except LedgerError as exc:
        raise fail(str(exc)) from None
    skills, problems = _load(r, names)
    settings = _settings(r, tier, workers, timeout, memory_mb, isolate)
    result = _run_with_progress(
        skills,
        settings,
        lambda done: run_audit(r, skills, problems, settings, run=not no_run, on_done=done),
    )
    write_reports(r, result, skills, junit=junit, markdown=markdown, html=html)
    if as_json:
        print_json(
            {
                "skills": result.judgements,
                "runs": [o.result_dict() for o in result.outcomes],
                "problems": problems,
                "recorded": result.recorded,
                "network_isolation": result.isolation_note is None if not no_run else None,
                "isolation_note": result.isolation_note,
            }
        )
    else:
        if result.outcomes:
            _runs_table(result.outcomes, result.skill_paths)
        table = Table(title="skill status")
        for col in ("skill", "status", "last pass", "verified on", "reasons"):
            table.add_column(col, overflow="fold")
        for j in result.judgements:
            style = STATUS_STYLE.get(j["status"], "")
            table.add_row(
                j["skill"],
                f"[{style}]{j['status']}[/]",
                (j["last_pass"] or "—")[:10],
                j["verified_on"] or "—",
                "; ".join(j["reasons"])[:300],
            )
        console.print(table)
        for p in problems:
            typer.echo(p)
        if result.isolation_note:
            err_console.print(f"[yellow]warning:[/yellow] {result.isolation_note}")
    raise typer.Exit(exit_code(result, fail_on))


def new(
    name: str = typer.Argument(..., help="kebab-case skill name"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing SKILL.md"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Scaffold skills/NAME/SKILL.md: it passes lint and its snippet passes on cpu-interpret."""
    from kbase.validators.scaffold import ScaffoldError, new_skill

    r = root_path(root)
    try:
        path = new_skill(r, name, force=force)
    except ScaffoldError as exc:
        raise fail(str(exc)) from None
    shown = str(path.relative_to(r))
    if as_json:
        print_json({"created": shown})
    else:
        typer.echo(shown)
        err_console.print(f"next: edit it, then `kbase check {name}`")


def check(
    names: list[str] = typer.Argument(
        None, help="skill names or paths (with --changed: added to them)"
    ),
    changed: bool = typer.Option(
        False, "--changed", help="only skills changed since --base, uncommitted included"
    ),
    base: str | None = typer.Option(
        None, "--base", help="revision to diff against (default: origin/main, main, HEAD)"
    ),
    tier: str = typer.Option("auto", "--tier", help="auto | cpu-interpret | cpu-compile | gpu"),
    workers: int = WorkersOpt,
    isolate: bool = IsolateOpt,
    record: bool = typer.Option(
        False, "--record/--no-record", help="append the runs to the ledger"
    ),
    junit: Path | None = JunitOpt,
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Lint and verify skills (by default the changed ones); exit 1 on any problem or failed run."""
    from kbase.ingest.skills import lint_paths
    from kbase.validators.audit import Recorder
    from kbase.validators.changes import ChangesError, changed_skills
    from kbase.validators.report import junit_xml
    from kbase.validators.runner import verify_skills
    from kbase.validators.select import skill_file

    _check_tier(tier)
    r = root_path(root)
    refs = list(names or [])
    used_base = None
    ledger_problems: list[str] = []
    if changed:
        from kbase.validators.changes import ledger_change_problems

        try:
            found, used_base = changed_skills(r, base)
            ledger_problems, _ = ledger_change_problems(r, base)
        except ChangesError as exc:
            raise fail(str(exc)) from None
        refs += [n for n in found if n not in refs]
    elif not refs:
        raise fail("name skills to check, or pass --changed")
    if not refs:
        if as_json:
            print_json(
                {"base": used_base, "skills": [], "problems": ledger_problems, "results": []}
            )
        else:
            for p in ledger_problems:
                typer.echo(p)
            err_console.print(f"no skill changed since {used_base}")
        if ledger_problems:
            raise typer.Exit(1)
        return
    try:
        files = [skill_file(r, ref) for ref in refs]
    except LookupError as exc:
        raise fail(str(exc)) from None
    problems = ledger_problems + [str(p) for p in lint_paths(files, r)]
    skills, _load_problems = _load(r, [str(f) for f in files])
    settings = _settings(r, tier, workers, None, None, isolate)
    outcomes = _run_with_progress(
        skills,
        settings,
        lambda done: verify_skills(skills, settings, Recorder(r, done) if record else done),
    )
    paths = {s.name: s.path for s in skills}
    if junit:
        junit.parent.mkdir(parents=True, exist_ok=True)
        junit.write_text(junit_xml(outcomes, problems, paths, "kbase-check"), encoding="utf-8")
    if as_json:
        print_json(
            {
                "base": used_base,
                "skills": [s.name for s in skills],
                "problems": problems,
                "results": [o.result_dict() for o in outcomes],
            }
        )
    else:
        for p in problems:
            typer.echo(p)
        _runs_table(outcomes, paths)
        err_console.print(
            f"checked {len(refs)} skill(s)" + (f" changed since {used_base}" if used_base else "")
        )
    if problems or _bad(outcomes):
        raise typer.Exit(1)


def merge_ledger(
    other: Path = typer.Argument(..., help="another copy of ledger/verifications.jsonl"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Append the runs another machine recorded (e.g. the GPU box's ledger) that this ledger lacks."""
    from kbase.validators.ledger import LedgerError
    from kbase.validators.ledger import merge_ledger as merge

    r = root_path(root)
    if not other.is_file():
        raise fail(f"{other}: no such file")
    try:
        added, present = merge(r, other)
    except LedgerError as exc:
        raise fail(str(exc)) from None
    if as_json:
        print_json({"added": added, "already_present": present})
    else:
        err_console.print(f"{added} row(s) added, {present} already present")


def register(app: typer.Typer) -> None:
    app.command()(verify)
    app.command()(audit)
    app.command()(new)
    app.command()(check)
    app.command("merge-ledger")(merge_ledger)
