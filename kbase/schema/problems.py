"""`Problem`: what every check reports, with a location a human can jump to."""

from __future__ import annotations

from kbase.schema.base import Model


class Problem(Model):
    """A problem with a location a human can jump to; `--json` always prints these five keys.

    `code` is a short kebab-case kind (`unbacked-number`, `duplicate-key`) when a tool should be
    able to tell problems apart without parsing the message.
    """

    path: str
    line: int = 0
    field: str | None = None
    code: str | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        tag = self.code or self.field
        return f"{where}: [{tag}] {self.message}" if tag else f"{where}: {self.message}"
