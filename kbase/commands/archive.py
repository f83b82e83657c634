"""PR archive sub-commands: `kbase mine`, `kbase history`, `kbase recipe`."""

from __future__ import annotations

import typer

from kbase.commands.common import (
    JsonOpt,
    RootOpt,
    add_commands,
    console,
    err_console,
    kb,
    print_json,
    progress_bar,
)
from kbase.errors import NotFound
from kbase.serve.paging import DEFAULT_HISTORY_LIMIT, MAX_HISTORY_LIMIT, page_history


def mine(
    repo: str = typer.Option(..., "--repo", help="path of a local clone (not a shallow one)"),
    name: str = typer.Option(..., "--name", help="archive name: cards go to pr_archive/<name>/"),
    recipe: str | None = typer.Option(
        None,
        help="recipe name (pr_archive/recipes/<name>.yaml) or file; "
        "default: the recipe named like --name, if any",
    ),
    since: str | None = typer.Option(None, "--since", help="mine only commits after this revision"),
    full: bool = typer.Option(
        False, "--full", help="ignore the saved state and mine the whole history"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Mine a clone's history into one card per PR (or direct push) under pr_archive/<name>/.

    Walks every commit reachable from HEAD, not only the first-parent line.
    A PR merge owns the commits it brings in; PRs behind other merges get cards of their own.
    A run of 50 or more commits is parsed in two worker processes (KBASE_MINE_WORKERS)."""
    # kbase.mine_cli answers a no-op without typer (kbase.cli); keep their output alike
    base = kb(root)
    if not err_console.is_terminal:  # no bar to draw
        report = base.mine(repo, name, recipe, since=since, full=full)
    else:
        with progress_bar(f"mining {name}") as bar:
            task = bar.add_task("", total=None)

            def tick(done: int, total: int) -> None:
                if done % 25 == 0 or done == total:
                    bar.update(task, completed=done, total=total)

            report = base.mine(repo, name, recipe, since=since, full=full, progress=tick)
    if as_json:
        print_json(report.as_dict())
        return
    for line in report.summary():
        console.print(line, highlight=False)


def history(
    family: str | None = typer.Argument(None, help="family name from the recipe, e.g. qwen3"),
    repo: str = typer.Option(..., "--repo", help="archive name (pr_archive/<name>/)"),
    path: list[str] = typer.Option(
        [],
        "--path",
        help="path glob (`*` in one segment, `**` across); repeatable; no family needed",
    ),
    since: str | None = typer.Option(None, "--since", help="only cards dated on/after YYYY-MM-DD"),
    until: str | None = typer.Option(None, "--until", help="only cards dated on/before YYYY-MM-DD"),
    limit: int = typer.Option(
        DEFAULT_HISTORY_LIMIT, "--limit", min=1, max=MAX_HISTORY_LIMIT, help="cards per page"
    ),
    cursor: str | None = typer.Option(
        None, "--cursor", help="next_cursor of the previous page (--json prints it)"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The family's (or the paths') timeline, newest first: date, PR or commit, title, files."""
    result = kb(root).history(repo, family, paths=path or None)
    if not result.available:
        raise NotFound(f"no archive {repo!r}: {result.message}")
    page = page_history(result, since, until, limit, cursor)
    if as_json:
        print_json(page)
        return
    from rich.table import Table

    rows = page["prs"]
    what = family or " ".join(path)
    shown = f"{len(rows)} of {page['total']} card(s), newest first"
    table = Table(title=f"{repo} / {what}: {shown}", title_justify="left")
    for col in ("date", "PR", "title", "files", "categories"):
        table.add_column(col, overflow="fold")
    for row in rows:  # HistoryRow dicts
        files = row["files"]
        more = f" (+{len(files) - 3})" if len(files) > 3 else ""
        table.add_row(
            row["date"][:10],
            f"#{row['pr']}" if row["pr"] is not None else row["sha"][:12],
            row["title"] + (" [via rename]" if row["via_rename"] else ""),
            ", ".join(files[:3]) + more,
            ", ".join(row["categories"]),
        )
    console.print(table)
    if page["next_cursor"]:
        err_console.print(f"more: --cursor {page['next_cursor']}", highlight=False)


recipe_app = typer.Typer(help="Recipes without writing one by hand: suggest families, lint globs.")


def recipe_suggest(
    repo: str = typer.Option(..., "--repo", help="path of a local clone"),
    name: str = typer.Option(..., "--name", help="archive name for the recipe"),
    write: bool = typer.Option(
        False, "--write", help="save it as pr_archive/recipes/<name>.yaml (never overwrites)"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Propose families from the directory structure and file names (upstream from origin)."""
    out = kb(root).recipe_suggest(repo, name, write=write)
    text, dest = out.pop("text"), out["written"]
    if as_json:
        print_json(out)
        return
    console.print(text, highlight=False, markup=False, end="")
    if out["left_out"]:
        err_console.print(
            f"stopped at {len(out['families'])} families: {len(out['left_out'])} more left out "
            "(listed in the recipe's first comment)",
            highlight=False,
        )
    if dest:
        err_console.print(f"written to {dest}", highlight=False)


def recipe_lint(
    recipe: str = typer.Argument(..., help="recipe name (pr_archive/recipes/<name>.yaml) or file"),
    repo: str = typer.Option(..., "--repo", help="path of a local clone to check the globs on"),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Globs that match nothing in the history, or pull in files named after another family."""
    out = kb(root).recipe_lint(recipe, repo)
    path, problems = out["recipe"], out["problems"]
    if as_json:  # "paths" is already the count of paths in the history (issue #27: len() of it)
        print_json(
            {"recipe": str(path), "paths": out["paths"], "problems": [vars(p) for p in problems]}
        )
    else:
        for p in problems:
            ex = f" e.g. {', '.join(p.examples)}" if p.examples else ""
            console.print(
                f"{path}: {p.family}: {p.glob}: {p.message}{ex}", highlight=False, markup=False
            )
        if not problems:
            console.print(f"{path}: every glob matches, none pulls in another family's files")
    if problems:
        raise typer.Exit(1)


add_commands(recipe_app, ("suggest", recipe_suggest), ("lint", recipe_lint))
COMMANDS = (mine, history, ("recipe", recipe_app))
