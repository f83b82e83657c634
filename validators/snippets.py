"""Turn a skill's marked code blocks into files (docs/skill-format.md, "How a snippet runs"),
keeping a line map, so that a traceback or nvcc diagnostic is reported as a line of SKILL.md."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from kbase.errors import KbaseError

# Part of every snippet hash (ingest/skills.py): bump it with any change to how a snippet runs
# (run_command.py's bootstrap and commands, the layout below), so that rows of the old runner
# stop counting. 2: the completion record. 3: only the process that started the run completes it.
RUNNER_VERSION = "3"

PYTHON_LANGS = {"python", "py", "python3"}
CUDA_LANGS = {"cuda", "cu"}
OTHER_LANGS = {"cpp", "c++", "c", "h", "cuh", "hpp"}
# a block's file extension: the language's name, but for the two spellings of CUDA and of C++
_EXT = {lang: f".{lang}" for lang in ("cpp", "c", "h", "cuh", "hpp")}
_EXT |= {"cuda": ".cu", "cu": ".cu", "c++": ".cpp"}
_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,80}$")


class SnippetError(KbaseError, ValueError):
    """A snippet block that cannot be laid out (bad language or file name); carries the .md line."""

    def __init__(self, line: int, message: str):
        self.line = line
        super().__init__(message)


@dataclass
class SourceFile:
    name: str
    lang: str
    text: str
    # (first line in this file, first line in the .md, number of lines), 1-based
    spans: list[tuple[int, int, int]] = field(default_factory=list)

    def md_line(self, line: int) -> int | None:
        hits = (md + line - start for start, md, n in self.spans if start <= line < start + n)
        return next(hits, None)


@dataclass
class SnippetLayout:
    files: list[SourceFile]

    @property
    def python(self) -> SourceFile | None:
        return next((f for f in self.files if f.name == "snippet.py"), None)

    @property
    def cuda_files(self) -> list[SourceFile]:
        return [f for f in self.files if f.lang in CUDA_LANGS]

    def md_line(self, filename: str, line: int) -> int | None:
        base = Path(filename).name
        return next((f.md_line(line) for f in self.files if f.name == base), None)


def _file_option(info: str) -> str | None:
    return next((w[len("file=") :] for w in info.split()[1:] if w.startswith("file=")), None)


def layout_blocks(blocks) -> SnippetLayout:
    """Lay out CodeBlock-like objects (info, lang, code, line) as the files of one run."""
    py_parts: list[str] = []
    py_spans: list[tuple[int, int, int]] = []
    py_next_line = 1
    others: list[SourceFile] = []
    for b in blocks:
        lang = (b.lang or "").lower()
        code = b.code if b.code.endswith("\n") or not b.code else b.code + "\n"
        n_lines = code.count("\n")
        first_md_line = b.line + 1  # the code starts on the line after the opening fence
        if lang in PYTHON_LANGS:
            if _file_option(b.info):
                raise SnippetError(
                    b.line,
                    "file= is only for non-Python blocks; Python blocks are joined into snippet.py",
                )
            py_parts.append(code)
            py_spans.append((py_next_line, first_md_line, n_lines))
            py_next_line += n_lines
            continue
        if lang not in CUDA_LANGS and lang not in OTHER_LANGS:
            why = f"snippet block language {b.lang or '(none)'!r} cannot run; "
            raise SnippetError(b.line, why + "use python, cuda/cu, cpp, c, h or cuh")
        name = _file_option(b.info) or f"snippet_{len(others)}{_EXT[lang]}"
        if not _SAFE_NAME.match(name) or name == "snippet.py":
            raise SnippetError(b.line, f"file name {name!r} is not a plain file name")
        if any(o.name == name for o in others):
            raise SnippetError(b.line, f"two snippet blocks write the same file {name!r}")
        others.append(SourceFile(name, lang, code, [(1, first_md_line, n_lines)]))
    py = [SourceFile("snippet.py", "python", "".join(py_parts), py_spans)] if py_parts else []
    return SnippetLayout(files=py + others)


# A Python traceback frame (`File ".../snippet.py", line 12, in f`), the same frame as
# faulthandler prints it after a crash (`File ".../snippet.py", line 12 in f`), and nvcc/gcc
# diagnostics (`kernel.cu(12): error`, `kernel.cu:12:5: error`).
_PY_FRAME = re.compile(r'File "([^"]+)", line (\d+)')
_CC_DIAG = re.compile(r"([A-Za-z0-9_.-]+\.(?:cu|cuh|cpp|c|h|hpp))(?:\((\d+)\)|:(\d+):)")


def locate_failure(layout: SnippetLayout, output: str) -> int | None:
    """The SKILL.md line that the output blames: the innermost snippet frame, or the first
    diagnostic."""

    def lines(found: Iterator[re.Match[str]]) -> Iterator[int]:
        for m in found:  # a diagnostic's line is `(12)` or `:12:`; a frame has one group only
            line = layout.md_line(m[1], int(m[2] or m[3]))
            if line is not None:
                yield line

    # faulthandler lists the most recent call first, so its first snippet frame is the innermost
    crash = output.find("most recent call first")
    if crash >= 0 and (line := next(lines(_PY_FRAME.finditer(output, crash)), None)) is not None:
        return line
    frames = list(lines(_PY_FRAME.finditer(output)))
    return frames[-1] if frames else next(lines(_CC_DIAG.finditer(output)), None)
