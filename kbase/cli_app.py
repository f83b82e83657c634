"""The `kbase` command as a typer app (kbase/cli.py starts it). Each area registers its own
sub-commands from kbase/commands/."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, MutableMapping
from typing import Any

import typer
from typer.core import TyperGroup

from kbase.cli import COMMAND_MODULES


class _Commands(MutableMapping[str, Any]):
    """A group's sub-commands by name, each module's built on first lookup."""

    def __init__(self, built: MutableMapping[str, Any]):
        self._built = dict(built)

    def _load(self, module: str) -> None:
        sub = typer.Typer(pretty_exceptions_enable=False)
        importlib.import_module(f"kbase.commands.{module}").register(sub)
        self._built.update(typer.main.get_group(sub).commands)

    def __getitem__(self, name: str) -> Any:
        if name not in self._built and COMMAND_MODULES.get(name):
            self._load(COMMAND_MODULES[name])  # type: ignore[arg-type]
        return self._built[name]

    def __setitem__(self, name: str, command: Any) -> None:
        self._built[name] = command

    def __delitem__(self, name: str) -> None:
        del self._built[name]

    def __iter__(self) -> Iterator[str]:
        yield from COMMAND_MODULES
        yield from (n for n in self._built if n not in COMMAND_MODULES)

    def __len__(self) -> int:
        return len(set(COMMAND_MODULES) | set(self._built))


class _Group(TyperGroup):
    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.commands = _Commands(self.commands)


app = typer.Typer(
    name="kbase",
    cls=_Group,
    help="A searchable, verified knowledge base of GPU-kernel engineering experience.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from kbase import __version__

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
        "--default-root",
        envvar="KBASE_DEFAULT_ROOT",
        help="knowledge base to use when neither --root nor KBASE_ROOT names one "
        "(agent-runtime configurations set it)",
    ),
) -> None:
    """kbase: search, verify and serve GPU-kernel engineering knowledge.

    The knowledge-base root is --root, else $KBASE_ROOT, else the nearest folder at or above the
    current one that holds skills/ or pr_archive/. `kbase init PATH` creates one.
    """
    if default_root:
        import os

        os.environ["KBASE_DEFAULT_ROOT"] = default_root


def init(
    path: str = typer.Argument(".", help="folder to make a knowledge base (created if missing)"),
) -> None:
    """Create a knowledge-base root on purpose: PATH/skills/, PATH/pr_archive/, .kbase/ ignored."""
    from kbase.commands.common import fail
    from kbase.config import RootError, init_root

    try:
        made = init_root(path)
    except (RootError, OSError) as exc:
        raise fail(str(exc)) from None
    for m in made:
        typer.echo(f"created {m}")
    if not made:
        typer.echo(f"{path} is already a knowledge base")


app.command()(init)


def run() -> None:
    from kbase.errors import KbaseError

    try:
        app()
    except KbaseError as exc:  # raised outside a command's own error translation
        from kbase.commands.common import fail

        raise SystemExit(fail(str(exc)).exit_code) from None
