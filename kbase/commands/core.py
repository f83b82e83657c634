"""Core sub-commands: index, search, get, lint."""

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


def lint(
    paths: list[Path] = typer.Argument(None, help="SKILL.md files or skill folders (default: all)"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check skills against the format; print `path:line: message` per problem, exit 1 on any."""
    from kbase.ingest.skills import find_skill_files, lint_paths

    r = root_path(root)
    targets = [p.resolve() for p in paths] if paths else find_skill_files(r)
    problems = lint_paths(targets, r)
    if as_json:
        print_json({"checked": len(targets), "problems": [p.model_dump() for p in problems]})
    else:
        for p in problems:
            typer.echo(str(p))
        err_console.print(f"{len(targets)} skill(s) checked, {len(problems)} problem(s)")
    if problems:
        raise typer.Exit(1)


def _kb(root: str | None):
    from kbase.api import KnowledgeBase

    return KnowledgeBase(root=root)


def _run_index(kb, quiet: bool = False, gc: bool = True):
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=quiet,
    ) as prog:
        task = prog.add_task("indexing", total=None)

        def cb(stage: str, done: int, total: int) -> None:
            prog.update(task, description=stage, completed=done, total=total)

        return kb.index(progress=cb, gc=gc)


def index(
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
    no_gc: bool = typer.Option(
        False, "--no-gc", help="keep vectors of removed entries (shared Chroma server readers)"
    ),
) -> None:
    """Build or update the hybrid index (only changed entries are re-embedded)."""
    rep = _run_index(_kb(root), gc=not no_gc)
    if as_json:
        print_json(rep.as_dict())
    else:
        for p in rep.problems:
            typer.echo(str(p), err=True)
        console.print(
            f"indexed {rep.entries} entries ({rep.chunks} chunks); embedded {len(rep.embedded_entries)} "
            f"changed entries; removed {len(rep.removed_entries)}; {len(rep.problems)} problem(s) "
            f"in {rep.seconds.get('total', 0):.2f}s",
            highlight=False,
        )
        if rep.kept_previous:
            console.print(
                f"kept the previous version of: {', '.join(rep.kept_previous)}", highlight=False
            )
    if rep.problems:
        raise typer.Exit(1)


def search(
    query: str = typer.Argument(
        ..., help="what you are looking for: a symptom, an error message, a topic"
    ),
    k: int = typer.Option(5, "-k", min=1, max=50, help="number of hits"),
    kind: str | None = typer.Option(None, "--kind", help="skill or pr"),
    repo: str | None = typer.Option(None, "--repo", help="only PR cards of this archive repo"),
    tag: list[str] = typer.Option([], "--tag", help="key=value, e.g. archs=sm90 (repeatable)"),
    status: list[str] = typer.Option(
        [], "--status", help="only entries with this status (repeatable)"
    ),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid, bm25 or dense"),
    since: str | None = typer.Option(
        None, "--since", help="only PR cards dated on or after YYYY-MM-DD"
    ),
    until: str | None = typer.Option(
        None, "--until", help="only PR cards dated on or before YYYY-MM-DD"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Search skills and PR cards (builds the index on first use)."""
    kb = _kb(root)
    if not kb.is_indexed():
        rep = _run_index(kb, quiet=as_json)
        for p in rep.problems:
            typer.echo(str(p), err=True)
    try:
        hits = kb.search(
            query,
            k=k,
            kind=kind,
            repo=repo,
            tags=tag,
            status=status or None,
            mode=mode,
            since=since,
            until=until,
        )
    except ValueError as exc:
        raise fail(str(exc))
    if as_json:
        print_json({"query": query, "hits": [h.model_dump(mode="json") for h in hits]})
        return
    from rich.table import Table

    table = Table(show_lines=False, header_style="bold")
    for col in ("#", "id", "status", "where", "snippet"):
        table.add_column(col, overflow="fold")
    for i, h in enumerate(hits, 1):
        table.add_row(str(i), h.id, h.status, f"{h.path}:{h.line} ({h.section})", h.snippet[:160])
    console.print(table)
    if not hits:
        err_console.print("no hits")


def get(
    entry_id: str = typer.Argument(..., metavar="ID", help="skill name or pr:<repo>#<N>"),
    section: str | None = typer.Option(
        None, "--section", help="only this section (e.g. steps, Verification)"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Print one entry in full."""
    kb = _kb(root)
    try:
        doc = kb.get(entry_id, section=section)
    except KeyError as exc:
        raise fail(str(exc.args[0]), code=1)
    if as_json:
        print_json(doc.model_dump(mode="json"))
        return
    console.print(
        f"[bold]{doc.title}[/bold]  ({doc.id}, {doc.status})  {doc.path}", highlight=False
    )
    typer.echo(doc.text)


def register(app: typer.Typer) -> None:
    app.command()(index)
    app.command()(search)
    app.command()(get)
    app.command()(lint)
