"""PR archive sub-commands: `kbase mine` and `kbase history`.

gitpython is imported only inside `mine` (through kbase.ingest.mining), so the rest of the
CLI runs on machines without it.
"""

from __future__ import annotations

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


def mine(
    repo: str = typer.Option(..., "--repo", help="path of a local clone (not a shallow one)"),
    name: str = typer.Option(..., "--name", help="archive name: cards go to pr_archive/<name>/"),
    recipe: str | None = typer.Option(
        None,
        "--recipe",
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
    """Mine first-parent history of a clone into one card per PR under pr_archive/<name>/."""
    if since and full:
        raise fail("--since and --full cannot be used together")
    from kbase.ingest.recipes import RecipeError, resolve_recipe

    r = root_path(root)
    try:
        rec = resolve_recipe(recipe, name, r)
    except RecipeError as re_:
        for p in re_.problems:
            err_console.print(str(p), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2)
    except ValueError as exc:  # --name that is not kebab-case
        raise fail(f"--name {name!r}: {exc}")
    try:
        import git  # noqa: F401  (gitpython drives the repository; checked here for a clear message)
    except ImportError as exc:
        raise fail(f"mining needs gitpython ({exc}); install it with `pip install gitpython`")
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from kbase.ingest.mining import MiningError
    from kbase.ingest.mining import mine as run_mine

    with Progress(
        TextColumn(f"mining {name}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err_console,
        transient=True,
        disable=not err_console.is_terminal,
    ) as bar:
        task = bar.add_task("mine", total=None)

        def tick(done: int, total: int) -> None:
            if done % 25 == 0 or done == total:
                bar.update(task, completed=done, total=total)

        try:
            report = run_mine(repo, r, rec, since=since, full=full, progress=tick)
        except MiningError as exc:
            raise fail(str(exc))
    if as_json:
        print_json(report.as_dict())
        return
    console.print(
        f"[bold]{name}[/bold]: {report.mode} ({report.reason or report.range})", highlight=False
    )
    console.print(
        f"  commits {report.commits}, PRs {report.prs}, without a PR number {report.without_pr}; "
        f"cards written {report.written}, unchanged {report.unchanged}, removed {len(report.removed)}"
        f"{', kept with Notes ' + str(report.orphaned) if report.orphaned else ''}; {report.seconds:.2f}s",
        highlight=False,
    )


def history(
    family: str = typer.Argument(..., help="family name from the recipe, e.g. qwen3"),
    repo: str = typer.Option(..., "--repo", help="archive name (pr_archive/<name>/)"),
    recipe: str | None = typer.Option(
        None, "--recipe", help="take family globs from this recipe instead of the last mine"
    ),
    root: str | None = RootOpt,
    as_json: bool = JsonOpt,
) -> None:
    """The family's timeline: date, PR, title, files and categories, oldest first."""
    from kbase.ingest.cards import read_families, timeline

    r = root_path(root)
    folder = r / "pr_archive" / repo
    if not folder.is_dir():
        raise fail(
            f"no archive {repo!r} under {r / 'pr_archive'} (run `kbase mine --repo PATH --name {repo}` first)"
        )
    families = read_families(r, repo)
    if recipe:
        from kbase.ingest.recipes import RecipeError, find_recipe, load_recipe_file

        try:
            families = load_recipe_file(find_recipe(recipe, r), r).families
        except RecipeError as re_:
            raise fail("; ".join(map(str, re_.problems)))
    if family not in families:
        known = ", ".join(sorted(families)) or "none recorded; mine with a recipe"
        raise fail(f"unknown family {family!r} for {repo} (known: {known})")
    rows = timeline(r, repo, family, families[family])
    if as_json:
        print_json({"repo": repo, "family": family, "globs": families[family], "prs": rows})
        return
    from rich.table import Table

    table = Table(title=f"{repo} / {family}: {len(rows)} PR(s)", title_justify="left")
    for col in ("date", "PR", "title", "files", "categories"):
        table.add_column(col, overflow="fold")
    for row in rows:
        files = ", ".join(row["files"][:3]) + (
            f" (+{len(row['files']) - 3})" if len(row["files"]) > 3 else ""
        )
        title = row["title"] + (" [via rename]" if row["via_rename"] else "")
        table.add_row(row["date"][:10], f"#{row['pr']}", title, files, ", ".join(row["categories"]))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command()(mine)
    app.command()(history)
