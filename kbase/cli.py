"""The `kbase` command. Each area registers its own sub-commands from kbase/commands/."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="kbase",
    help="A searchable, verified knowledge base of GPU-kernel engineering experience.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root_callback() -> None:
    """kbase: search, verify and serve GPU-kernel engineering knowledge."""


# parse → index → retrieve → serve, with validators beside it
_COMMAND_MODULES = ("core", "validate", "archive", "serve", "trust")

for _mod in _COMMAND_MODULES:
    importlib.import_module(f"kbase.commands.{_mod}").register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
