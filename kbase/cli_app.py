"""The `kbase` command as a typer app (kbase/cli.py starts it). Each area registers its own
sub-commands from kbase/commands/ (importing them all is ~25 ms of CPU, under 5 % of a cold
search: loading them on first lookup did not pay)."""

from __future__ import annotations

import importlib
import os

import typer

from kbase import __version__
from kbase.commands.common import add_commands, fail
from kbase.config import RootError, init_root

app = typer.Typer(
    name="kbase",
    help="A searchable, verified knowledge base of GPU-kernel engineering experience.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kbase {__version__}")
        raise typer.Exit()


@app.callback()
def _root_callback(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="print the version and exit",
    ),
    default_root: str | None = typer.Option(
        None,
        envvar="KBASE_DEFAULT_ROOT",
        help="knowledge base to use when neither --root nor KBASE_ROOT names one "
        "(agent-runtime configurations set it)",
    ),
) -> None:
    """kbase: search, verify and serve GPU-kernel engineering knowledge.

    The knowledge-base root is --root, else $KBASE_ROOT, else the nearest folder at or above the
    current one that holds skills/ or pr_archive/. `kbase init PATH` creates one."""
    if default_root:
        os.environ["KBASE_DEFAULT_ROOT"] = default_root


def init(
    path: str = typer.Argument(".", help="folder to make a knowledge base (created if missing)"),
) -> None:
    """Create a knowledge-base root on purpose: PATH/skills/, PATH/pr_archive/, .kbase/ ignored."""
    try:
        made = init_root(path)
    except (RootError, OSError) as exc:
        raise fail(str(exc)) from None
    for m in made:
        typer.echo(f"created {m}")
    if not made:
        typer.echo(f"{path} is already a knowledge base")


# every area's commands, then init: the order of `kbase --help` (command groups come last)
for _area in ("core", "validate", "archive", "serve", "trust"):
    add_commands(app, *importlib.import_module(f"kbase.commands.{_area}").COMMANDS)
app.command()(init)


def run() -> None:
    app()  # every command translates its own KbaseErrors (commands/common.handles_errors)
