"""Reading knowledge-base files safely: size, encoding, binary content and symlinks."""

from __future__ import annotations

import os
from pathlib import Path

from kbase.errors import ProblemsError
from kbase.schema import Problem

MAX_FILE_BYTES = 1_000_000  # a skill or card larger than this is almost surely a mistake


class FileProblem(ProblemsError):
    """A file kbase will not read (size, encoding, binary, symlink); `.problem` says which."""

    def __init__(self, problem: Problem):
        self.problem = problem
        super().__init__([problem])


def display_path(path: Path, root: Path) -> str:
    try:
        return str(path.relative_to(root))
    except ValueError:
        return str(path)


def read_text(path: Path, root: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """The file's text, or FileProblem naming the file and what is wrong with it."""
    shown = display_path(path, root)
    real = Path(os.path.realpath(path))
    real_root = Path(os.path.realpath(root))
    if path.is_symlink() and real_root not in real.parents and real != real_root:
        raise FileProblem(
            Problem(path=shown, message=f"symlink points outside the knowledge-base root ({real})")
        )
    try:
        size = real.stat().st_size
    except OSError as exc:
        raise FileProblem(Problem(path=shown, message=f"cannot read: {exc.strerror}")) from None
    if size == 0:
        raise FileProblem(Problem(path=shown, message="file is empty"))
    if size > max_bytes:
        raise FileProblem(
            Problem(path=shown, message=f"file is too large ({size} bytes; limit {max_bytes})")
        )
    data = real.read_bytes()
    if b"\x00" in data[:8192]:
        raise FileProblem(Problem(path=shown, message="file looks binary (contains NUL bytes)"))
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise FileProblem(
            Problem(
                path=shown,
                line=line,
                message=f"not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})",
            )
        ) from None
    if not text.strip():
        raise FileProblem(Problem(path=shown, message="file is empty"))
    return text.replace("\r\n", "\n").lstrip("\ufeff")
