"""Core sub-commands: index, search, get, list, lint. Each translates to one KnowledgeBase call."""

from __future__ import annotations

import os
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.text import Text

from kbase.closed_sets import ENTRY_STATUSES, KINDS, MODES, STATUS_SPECS
from kbase.commands.common import (
    JsonOpt,
    RootOpt,
    console,
    err_console,
    fail,
    kb,
    print_json,
    progress_bar,
)


def lint(
    paths: list[Path] = typer.Argument(None, help="SKILL.md files or skill folders (default: all)"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Check skills against the format; print `path:line: message` per problem, exit 1 on any."""
    rep = kb(root).lint(paths or None)
    if as_json:
        print_json(rep.as_dict())
    else:
        for p in rep.problems:
            typer.echo(str(p))
        err_console.print(f"{rep.checked} skill(s) checked, {len(rep.problems)} problem(s)")
    if rep.problems:
        raise typer.Exit(1)


def _run_index(base: Any, gc: bool = True) -> Any:
    """base.index() with progress on stderr, whatever stdout gets (`--json` too): a bar on a
    terminal, else a plain line per stage and about one a second while embedding, which an
    agent's log shows (issue #27: a first search under --json was silent for minutes)."""
    if not base.is_indexed():
        n = base.source_count()
        what = f"{n} entry" if n == 1 else f"{n} entries"
        typer.echo(f"kbase: building the index, first use only: {what} under {base.root}", err=True)
    elif base.skills_changed():
        typer.echo("kbase: skills changed since the last index: updating it", err=True)
    if not sys.stderr.isatty():
        shown: dict[str, Any] = {"stage": "", "at": 0.0}

        def line(stage: str, done: int, total: int) -> None:
            now = time.monotonic()
            if stage != shown["stage"] or now - shown["at"] >= 1.0 or done == total:
                shown.update(stage=stage, at=now)
                count = f" {done}/{total}" if total else ""
                print(f"kbase: progress {stage}{count}", file=sys.stderr, flush=True)

        return base.index(progress=line, gc=gc)
    with progress_bar("[bold]index") as prog:
        task = prog.add_task("starting", total=None)

        def cb(stage: str, done: int, total: int) -> None:
            prog.update(task, description=stage, completed=done, total=total or None)

        return base.index(progress=cb, gc=gc)


def index(
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
    no_gc: bool = typer.Option(
        False, "--no-gc", help="keep vectors of removed entries (shared Chroma server readers)"
    ),
    device: str | None = typer.Option(
        None, "--device", help="embed on this torch device: cpu (default), cuda, cuda:1"
    ),
) -> None:
    """Build or update the hybrid index (only changed entries are re-embedded)."""
    if device:
        if device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise fail(f"--device {device}: torch sees no CUDA GPU on this machine")
        elif device != "cpu":
            raise fail(f"--device must be cpu, cuda or cuda:N, got {device!r}")
        os.environ["KBASE_DEVICE"] = device
    rep = _run_index(kb(root), gc=not no_gc)
    if as_json:
        print_json(rep.as_dict())
    else:
        for p in rep.problems:
            typer.echo(str(p), err=True)
        console.print(
            f"indexed {rep.entries} entries ({rep.chunks} chunks); "
            f"embedded {len(rep.embedded_entries)} changed entries; "
            f"removed {len(rep.removed_entries)}; {len(rep.problems)} problem(s) "
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
    k: int = typer.Option(5, "-k", help="number of hits (1-50)"),
    kind: str | None = typer.Option(None, "--kind", help=" or ".join(KINDS)),
    repo: str | None = typer.Option(None, "--repo", help="only PR cards of this archive repo"),
    tag: list[str] = typer.Option([], "--tag", help="key=value, e.g. archs=sm90 (repeatable)"),
    status: list[str] = typer.Option(
        [], help=f"only entries with this status (repeatable): {', '.join(ENTRY_STATUSES)}"
    ),
    mode: str = typer.Option("hybrid", "--mode", help=", ".join(MODES)),
    since: str | None = typer.Option(None, help="only PR cards dated on or after YYYY-MM-DD"),
    until: str | None = typer.Option(None, help="only PR cards dated on or before YYYY-MM-DD"),
    env: str | None = typer.Option(
        None, "--env", help="judge statuses for: local, or e.g. torch=2.8,triton=3.4,arch=sm90"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Search skills and PR cards (builds the index on first use). QUERY `-` reads stdin.

    Exit 0 with hits or without (then a note on stderr); 2 for bad input or a bad root."""
    from kbase.envspec import parse_env
    from kbase.schema import SearchQuery

    if query == "-":
        query = sys.stdin.read(64 * 1024)
    raw = {n: v for n, v in locals().items() if n in SearchQuery.model_fields}
    q = SearchQuery.parse(**raw | {"env": parse_env(env), "tags": tag})
    base = kb(root, one_query=True)  # the process ends after this search
    if not base.is_indexed() or base.skills_changed():
        rep = _run_index(base)
        for p in rep.problems:
            typer.echo(str(p), err=True)
    result = base.query(q)
    if as_json:
        print_json(result.model_dump(mode="json"))
        return
    render_hits(result.hits)
    if result.hits and not result.no_good_match:
        return
    err_console.print(
        "no good match: even the best hit is unlikely to fit this question; the knowledge "
        "base may not cover it (try the literal error line and your root-cause guess)"
        if result.hits
        else "no hits (not an error): try the literal error text, fewer words or fewer filters; "
        "`kbase list` shows what exists",
        highlight=False,
        soft_wrap=True,
    )


def get(
    entry_id: str = typer.Argument(..., metavar="ID", help="skill name or pr:<repo>#<N>"),
    section: str | None = typer.Option(None, help="only this section (e.g. steps, Verification)"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Print one entry in full."""
    doc = kb(root).get(entry_id, section=section)
    if as_json:
        print_json(doc.model_dump(mode="json"))
        return
    console.print(
        f"[bold]{doc.title}[/bold]  ({doc.id}, {doc.status})  {doc.path}", highlight=False
    )
    typer.echo(doc.text)
    if doc.claims and section is None:
        typer.echo("\nClaims (measured values from the ledger):")
        for c in doc.claims:
            typer.echo(f"- {c.id}: {c.rendered}")


def list_entries(
    kind: str | None = typer.Option(None, "--kind", help=" or ".join(KINDS)),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """List every entry with its status (from the index, or parsed now when there is none)."""
    rows = kb(root).list(kind=kind)
    if as_json:
        print_json({"entries": [r.model_dump(mode="json") for r in rows]})
        return
    for r in rows:
        typer.echo(f"{r.id}\t{r.status}\t{r.title}")


def render_hits(hits: list[Any]) -> None:
    """One hit per block, at the console's width (80 columns when piped or unknown): `N. id
    status  title`, then `where`, then the snippet; in a pipe no colour and no box drawing, so
    `grep` and `less` see plain text; ids are never folded in the middle."""
    if sys.stdout.isatty():
        con = Console(highlight=False)
    else:
        con = Console(width=80, no_color=True, highlight=False, color_system=None, soft_wrap=False)
    width = max(40, min(con.width, 120))
    for i, h in enumerate(hits, 1):
        lead = f"{i}. "
        pad = " " * len(lead)
        head = Text(lead)
        head.append(h.id, style="bold")
        head.append("  ")
        head.append(h.status, style=getattr(STATUS_SPECS.get(h.status), "style", ""))
        rest = width - len(lead) - len(h.id) - len(h.status) - 4
        title = h.title if len(h.title) <= max(rest, 10) else h.title[: max(rest, 10) - 1] + "…"
        if rest >= 10:
            head.append("  " + title)
        con.print(head, soft_wrap=True)
        if rest < 10:  # a long id: the title goes on its own line rather than folding the id
            con.print(Text(pad + title[: width - len(pad)]), soft_wrap=True)
        where = f"{h.path}:{h.line}" if h.line else h.path
        if h.section:
            where += f" ({h.section})"
        if getattr(h, "confidence", None) is not None:
            where += f"  confidence {h.confidence:.2f}"
        con.print(Text(pad + where, style="dim"), soft_wrap=True)
        snippet = " ".join(h.snippet.split())
        for line in textwrap.wrap(snippet, width=width - len(pad))[:3]:
            con.print(Text(pad + line), soft_wrap=True)
        if i < len(hits):
            con.print()


COMMANDS = (index, search, get, ("list", list_entries), lint)
