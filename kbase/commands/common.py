"""Options and output helpers shared by every sub-command, and the one error translation."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.text import Text

from kbase.cli import print_json  # noqa: F401 (re-exported for the commands)
from kbase.errors import KbaseError, ProblemsError

RootOpt = typer.Option(
    None, "--root", envvar="KBASE_ROOT", help="knowledge-base root (holds skills/ and pr_archive/)"
)
JsonOpt = typer.Option(False, "--json", help="print machine-readable JSON")


# stdout and stderr as rich prints to them (each finds sys.stdout/sys.stderr when it prints)
console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: int = 2) -> typer.Exit:
    """Print `error: message` to stderr (no markup, no wrapping); return the Exit to raise."""
    err_console.print(
        Text.assemble(("error:", "red"), " ", message), highlight=False, soft_wrap=True
    )
    return typer.Exit(code)


def handles_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Translate every KbaseError the façade raises into `error: ...` on stderr and its exit
    code; with --json the same problems are also printed on stdout, so a script gets JSON."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except KbaseError as exc:
            from kbase.schema import Problem

            if isinstance(exc, ProblemsError):
                problems = exc.problems
            else:
                field = getattr(exc, "field", None)
                problems = [Problem(path="", field=field, code=exc.code, message=str(exc))]
            if kwargs.get("as_json"):  # the problems in lint's shape
                print_json({"error": exc.code, "problems": [p.model_dump() for p in problems]})
            if not isinstance(exc, ProblemsError):
                raise fail(str(exc), code=exc.exit_code) from None
            for p in problems:
                err_console.print(str(p), highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(exc.exit_code) from None

    return wrapper


def add_commands(app: typer.Typer, *commands: Any) -> None:
    """Add each command (a function, or a (name, function) pair) with its KbaseErrors translated;
    a (name, Typer) pair adds a command group."""
    for c in commands:
        name, fn = c if isinstance(c, tuple) else (None, c)
        if isinstance(fn, typer.Typer):
            app.add_typer(fn, name=name)
        else:
            app.command(name)(handles_errors(fn))


def progress_bar(label: str) -> Any:
    """A rich progress bar on stderr: `label`, the bar, done/total, time elapsed and what is
    being done (its task's description); it vanishes when the work ends."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    return Progress(
        TextColumn(label),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=err_console,
        transient=True,
    )


def kb(root: str | None, one_query: bool = False) -> Any:
    """The façade every command goes through (`one_query`: see KnowledgeBase)."""
    from kbase.api import KnowledgeBase

    return KnowledgeBase(root=root, one_query=one_query)


def inert(text: str) -> str:
    """Text a snippet wrote (a run's message, a ledger row's reason) for a rich console: control
    characters shown as escapes, and `[...]` markup escaped, so it can neither drive the terminal
    nor restyle what kbase prints around it."""
    from kbase.api import KnowledgeBase

    return escape(KnowledgeBase.printable(str(text)))
