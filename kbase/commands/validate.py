"""Validator sub-commands: verify, audit, new, check.

Only typer/rich at module level: this module is imported by every `kbase` invocation, including
on the GPU machine where the search stack (chromadb, sentence-transformers) is not installed."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import typer

from kbase.closed_sets import (
    FAIL_LEVELS,
    STATUS_SPECS,
    TIER_CHOICES,
    TIER_SPECS,
    VERDICT_SPECS,
    severity,
)
from kbase.commands.common import (
    JsonOpt,
    RootOpt,
    console,
    err_console,
    inert,
    kb,
    print_json,
    progress_bar,
)

TierOpt = typer.Option("auto", "--tier", help=" | ".join(TIER_CHOICES))
WorkersOpt = typer.Option(1, "-j", "--workers", min=1, max=64, help="snippets run in parallel")
TimeoutOpt = typer.Option(None, min=1, help="override every skill's verification.timeout_s")
MemoryOpt = typer.Option(
    None,
    min=0,
    help="memory limit per run in MiB, 0 for none (default: "
    + "; ".join(f"{t.name} {t.default_memory_mb}" for t in TIER_SPECS.values())
    + ")",
)
IsolateOpt = typer.Option(
    True,
    "--sandbox/--unsafe-no-sandbox",
    help="run snippets in the bubblewrap sandbox (default); without it rows never verify",
)
JunitOpt = typer.Option(None, "--junit", help="write a JUnit XML report here")


def _with_bar(call: Any, *args: Any, **kw: Any) -> Any:
    """`call(*args, **kw)` with a progress bar on stderr, sized when the façade reports the
    planned (skill, tier) runs and advanced as each one ends."""
    with progress_bar("[bold]verify") as progress:
        task = progress.add_task("", total=None)

        def done(o: Any) -> None:
            progress.update(task, advance=1, description=f"{o.skill} [{o.tier}] {o.verdict}")

        return call(*args, on_plan=lambda n: progress.update(task, total=n), on_done=done, **kw)


def _opts(tier: str, workers: int, timeout: int | None, memory: int | None, isolate: bool) -> Any:
    from kbase.api_validate import RunOptions

    return RunOptions(tier, workers, timeout, memory, isolate)


def _runs_table(outcomes: list[Any], paths: dict[str, str]) -> None:
    from rich.table import Table

    table = Table(title="verification runs", show_lines=False)
    for col in ("skill", "tier", "verdict", "s", "where", "message"):
        table.add_column(col, no_wrap=col in ("skill", "tier"), overflow="ellipsis")
    for o in outcomes:
        where = f"{paths.get(o.skill, o.skill)}:{o.line}" if o.line else ""
        style = getattr(VERDICT_SPECS.get(o.verdict), "style", "")
        table.add_row(
            o.skill,
            o.tier,
            f"[{style}]{o.verdict}[/]",
            f"{o.duration_s:.1f}",
            inert(where),
            inert(_cut(o.message, 160)),
        )
    console.print(table)


def _failures_last(outcomes: list[Any], paths: dict[str, str]) -> None:
    """Repeat the bad runs after everything else: a log's tail (CI shows only that) names them."""
    bad = [o for o in outcomes if (spec := VERDICT_SPECS.get(o.verdict)) and spec.bad]
    for o in bad:
        where = f"{paths.get(o.skill, o.skill)}:{o.line}" if o.line else paths.get(o.skill, o.skill)
        err_console.print(
            f"[red]{o.verdict}[/red] {o.skill} \\[{o.tier}] {inert(where)}: {inert(o.message)}"
        )
    if bad:
        err_console.print(f"{len(bad)} bad run(s) of {len(outcomes)}")


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
    opts = _opts(tier, workers, timeout, memory_mb, isolate)
    rep = _with_bar(kb(root).verify, names, opts, record=record, junit=junit)
    if as_json:
        print_json(rep.as_json("verify"))
    else:
        _runs_table(rep.outcomes, rep.skill_paths)
        _findings(rep)
        for note in rep.notes:
            err_console.print(f"[yellow]note:[/yellow] {note}")
        err_console.print(f"{len(rep.outcomes)} run(s), {rep.recorded} recorded in the ledger")
        _failures_last(rep.outcomes, rep.skill_paths)
    if rep.failed:
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
    html: Path | None = typer.Option(None, help="write a self-contained HTML report here"),
    fail_on: str = typer.Option("failing", "--fail-on", help=" | ".join(FAIL_LEVELS)),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Run what this machine can, append to the ledger, and report every skill's status."""
    opts = _opts(tier, workers, timeout, memory_mb, isolate)
    reports = {"junit": junit, "markdown": markdown, "html": html}
    rep = _with_bar(kb(root).audit, names, opts, run=not no_run, fail_on=fail_on, **reports)
    if as_json:
        print_json(rep.as_json("audit"))
    else:
        if rep.outcomes:
            _runs_table(rep.outcomes, rep.skill_paths)
        _status_lines(rep.judgements)
        _findings(rep)
        _failures_last(rep.outcomes, rep.skill_paths)
        counts = Counter(j["status"] for j in _problems_first(rep.judgements))
        parts = ", ".join(f"{n} {s}" for s, n in counts.items()) or "none"
        err_console.print(
            f"audit: {len(rep.judgements)} skill(s): {parts}; exit {rep.exit_code}", highlight=False
        )
    raise typer.Exit(rep.exit_code)


def _findings(rep: Any) -> None:
    """Load problems, release regressions and the isolation warning (verify and audit)."""
    for p in rep.problems:
        typer.echo(str(p))
    for d in rep.releases:
        typer.echo(f"{d['skill']} [{d['tier']}] works on {d['from']}, not on {d['to']}: ")
        typer.echo("  " + "; ".join(d["why"]))
    if rep.isolation_note:
        err_console.print(f"[yellow]warning:[/yellow] {rep.isolation_note}")


def _status_lines(judgements: list[dict]) -> None:
    """Each skill's status, problems first: `status  skill  (last pass, verified on)` and its
    reasons under it, wrapped at word boundaries to the terminal and cut with an ellipsis. A
    five-column table folded ids mid-word at 80 columns (issue #27)."""
    import textwrap

    width = max(40, min(console.width, 120))
    for j in _problems_first(judgements):
        spec = STATUS_SPECS.get(j["status"])
        dates = ((j["last_pass"] or "")[:10], j["verified_on"] or "")
        when = inert(", ".join(x for x in dates if x))
        head = f"[{spec.style if spec else ''}]{j['status']:<13}[/] {j['skill']}"
        console.print(head + (f"  ({when})" if when else ""), highlight=False, soft_wrap=True)
        reasons = _cut("; ".join(j["reasons"]), 300)
        for line in textwrap.wrap(
            reasons, width - 14, break_long_words=False, break_on_hyphens=False
        ):
            console.print(" " * 14 + inert(line), highlight=False, soft_wrap=True)


def _problems_first(judgements: list[dict]) -> list[dict]:
    """Skills in STATUS_ORDER (failing, unverified, ..., stale-*, verified last), then by name."""
    return sorted(judgements, key=lambda j: (severity(j["status"]), j["skill"]))


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1].rstrip() + "…"


def new(
    name: str = typer.Argument(..., help="kebab-case skill name"),
    force: bool = typer.Option(False, "--force", help="overwrite an existing SKILL.md"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Scaffold skills/NAME/SKILL.md; lint flags its TODO text and its sample snippet until
    both are replaced."""
    shown = str(kb(root).new_skill(name, force=force))
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
        None,
        help="revision to diff against (default: the first of origin/main, main, origin/master, "
        "master; refused when none exists)",
    ),
    tier: str = TierOpt,
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
    opts = _opts(tier, workers, None, None, isolate)
    rep = _with_bar(
        kb(root).check, names, changed=changed, base=base, opts=opts, record=record, junit=junit
    )
    if as_json:
        print_json(rep.as_json("check"))
    else:
        for p in rep.problems:
            typer.echo(str(p))
        if not rep.ran:
            err_console.print(f"no skill changed since {rep.base}")
        else:
            _runs_table(rep.outcomes, rep.skill_paths)
            since = f" changed since {rep.base}" if rep.base else ""
            err_console.print(f"checked {len(rep.skill_paths)} skill(s){since}")
            _failures_last(rep.outcomes, rep.skill_paths)
    if rep.failed:
        raise typer.Exit(1)


def merge_ledger(
    other: Path = typer.Argument(..., help="another copy of ledger/verifications.jsonl"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Append the runs another machine recorded (e.g. the GPU box's ledger) that ours lacks."""
    added, present = kb(root).merge_ledger(other)
    if as_json:
        print_json({"added": added, "already_present": present})
    else:
        err_console.print(f"{added} row(s) added, {present} already present")


COMMANDS = (verify, audit, new, check, merge_ledger)
