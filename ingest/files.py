"""Reading knowledge-base files safely: size, encoding, binary content and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

from kbase.errors import ProblemsError
from kbase.schema import Problem

MAX_FILE_BYTES = 1_000_000  # a skill or card larger than this is almost surely a mistake


class FileProblem(ProblemsError):
    """A file kbase will not read (size, encoding, binary, symlink); `.problem` says which."""

    def __init__(self, path: str, message: str, line: int = 0, code: str | None = None):
        self.problem = Problem(path=path, line=line, code=code, message=message)
        super().__init__([self.problem])


def display_path(path: Path, root: Path) -> str:
    return str(path.relative_to(root) if path.is_relative_to(root) else path)


def read_checked(path: Path, root: Path, error: type[ProblemsError]) -> tuple[str, str]:
    """(the path as shown, the file's text); `error` holding the file's problem otherwise."""
    try:
        return display_path(path, root), read_text(path, root)
    except FileProblem as fp:
        raise error([fp.problem]) from None


def read_text(path: Path, root: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text, or FileProblem naming the file and what is wrong with it."""
    shown = display_path(path, root)
    real = Path(os.path.realpath(path))
    # A file under the root must stay under it once symlinks (the file's or a folder's) resolve.
    inside = Path(os.path.abspath(root)) in Path(os.path.abspath(path)).parents
    if (inside or path.is_symlink()) and Path(os.path.realpath(root)) not in real.parents:
        why = f"symlink points outside the knowledge-base root ({real})"
        raise FileProblem(shown, why, code="outside-root")
    try:
        size = real.stat().st_size
    except OSError as exc:
        raise FileProblem(shown, f"cannot read: {exc.strerror}") from None
    if size > max_bytes:
        raise FileProblem(shown, f"file is too large ({size} bytes; limit {max_bytes})")
    data = real.read_bytes()
    nul = data.find(b"\x00")
    if nul >= 0:
        line = data.count(b"\n", 0, nul) + 1
        raise FileProblem(shown, f"file looks binary (a NUL byte at offset {nul})", line, "binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        why = f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})"
        raise FileProblem(shown, why, line) from None
    if not text.strip():  # no bytes, or only whitespace
        raise FileProblem(shown, "file is empty")
    text = text.replace("\r\n", "\n")
    if "\r" in text and "\n" not in text.rstrip("\r"):
        why = "lines end in a bare CR (old Mac style); save the file with LF endings"
        raise FileProblem(shown, why, 1, "line-endings")
    return text.lstrip("\ufeff")
