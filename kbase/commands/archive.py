"""Sub-commands for this area are added by its issue."""
import typer


def register(app: typer.Typer) -> None:
    return None
