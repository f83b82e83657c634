"""The experience loop on the command line: `kbase feedback` and `kbase propose`."""

from __future__ import annotations

import typer

from kbase.commands.common import JsonOpt, RootOpt, kb, print_json


def feedback(
    entry_id: str = typer.Argument(..., metavar="ID", help="the entry you acted on"),
    verdict: str = typer.Argument(..., help="helpful, harmful or outdated"),
    note: str = typer.Option("", "--note", "-m", help="what happened, in a sentence or two"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Say how acting on an entry went (append-only log; shown with the entry)."""
    out = kb(root).feedback(entry_id, verdict, note, source="cli")
    if as_json:
        print_json(out)
        return
    c = out["feedback"]["counts"]
    typer.echo(
        f"recorded {verdict} for {entry_id} "
        f"(helpful {c['helpful']}, harmful {c['harmful']}, outdated {c['outdated']})"
    )


def propose(
    title: str = typer.Option(..., "--title", help="one line: the problem"),
    symptom: str = typer.Option(..., "--symptom", help="the symptom or the literal error text"),
    cause: str = typer.Option(..., "--cause", help="why it happened"),
    fix: str = typer.Option(..., "--fix", help="what fixed it"),
    snippet: typer.FileText | None = typer.Option(
        None, "--snippet", help="a Python file that exits 0 when the fix holds"
    ),
    name: str | None = typer.Option(None, "--name", help="kebab-case name (default: from title)"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Write a draft skill under skills/_drafts/ (status draft until a person reviews it)."""
    code = snippet.read(20_001) if snippet is not None else None
    out = kb(root).propose(title, symptom, cause, fix, snippet=code, name=name)
    if as_json:
        print_json(out)
        return
    typer.echo(f"wrote {out['path']} (status draft)")
    if out.get("note"):
        typer.echo(out["note"], err=True)


COMMANDS = (feedback, propose)
