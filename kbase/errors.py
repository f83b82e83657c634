"""Every error kbase raises on purpose, rooted in `KbaseError`. The adapters (CLI, HTTP, MCP)
translate by class (`http_status`, `exit_code`), never by message; exit 1 is kept for findings
(lint problems, failed runs, an unknown id), 2 for what could not be done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kbase.schema import Problem


class KbaseError(Exception):
    """Base of every error kbase raises deliberately; anything else is a bug."""

    http_status = 500
    exit_code = 2
    code = "error"  # the `code` of this error in JSON output


class InvalidArgument(KbaseError, ValueError):
    """A value a caller passed is not accepted; the message says what is and names the field."""

    http_status = 400
    code = "invalid-argument"

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(message)


class NotFound(KbaseError, KeyError):
    """An id, section, archive or family that does not exist."""

    http_status = 404
    exit_code = 1  # docs/agents.md: an unknown id is a finding, not bad usage
    code = "not-found"

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else "not found"


class Unavailable(KbaseError, RuntimeError):
    """The knowledge base cannot answer yet (no index, and building one was not allowed)."""

    http_status = 503
    code = "unavailable"


class TooManyWrites(KbaseError):
    """A server's write rate limit is reached; the message says when to try again."""

    http_status = 429
    code = "too-many-writes"


class ProblemsError(KbaseError):
    """One or more located problems (file, line, field) found in the knowledge base's own input.

    The one carrier of problem lists: parse, lint, recipe and card errors all raise a subclass.
    """

    code = "problems"

    def __init__(self, problems: list[Problem] | Problem):
        self.problems = list(problems) if isinstance(problems, (list, tuple)) else [problems]
        super().__init__("\n".join(str(p) for p in self.problems))
