"""Path globs with git `:(glob)` pathspec semantics (docs/pr-archive.md), shared by recipes,
cards and watch rules, so a family's PR set can be checked against `git log -- ':(glob)...'`."""

from __future__ import annotations

import functools
import re

# "**/", "**", "*", "?", a character class (a leading "!" or "]" is part of it), or one character
_TOKEN = re.compile(r"\*\*/?|[*?]|\[(?:!|\])?+[^]]*\]|.", re.S)
_WILD = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _glob_body(pattern: str) -> str:
    out: list[str] = []
    for tok in _TOKEN.findall(pattern):
        if tok in _WILD:
            out.append(_WILD[tok])
        elif tok == "[":
            raise ValueError(f"glob {pattern!r}: unclosed '['")
        elif tok[0] == "[":
            inner = tok[1:-1]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            cls = "[" + inner.replace("\\", "\\\\") + "]"
            try:  # a class alone compiles in microseconds; a reversed range must not crash later
                re.compile(cls)
            except re.error as exc:
                raise ValueError(f"glob {pattern!r}: bad character class {cls!r} ({exc})") from None
            out.append(cls)
        else:
            out.append(re.escape(tok))
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    return re.compile(glob_regex(pattern))


@functools.lru_cache(maxsize=4096)
def glob_regex(pattern: str) -> str:
    """The regular expression (text) of one glob; ValueError for a glob git would not take."""
    p = pattern.strip()
    if not p:
        raise ValueError("empty glob")
    p = p.lstrip("/")
    if not any(c in p for c in "*?["):
        # git matches a literal pathspec as a leading directory too
        return re.escape(p.rstrip("/")) + (r"/.*\Z" if p.endswith("/") else r"(?:/.*)?\Z")
    if p.endswith("/"):
        # git matches no file with it (a file path never ends in '/'): say what to write
        raise ValueError(f"glob {pattern!r} matches no file; write {p + '**'!r} for what is below")
    return _glob_body(p) + r"\Z"


@functools.lru_cache(maxsize=1024)
def compile_globs(patterns: tuple[str, ...]) -> re.Pattern[str]:
    if not patterns:
        return re.compile(r"(?!)")
    # one compile of the alternation: compiling each glob first as well doubled a recipe's cost
    return re.compile("|".join(f"(?:{glob_regex(p)})" for p in patterns))


class FamilyMatcher:
    """Which families a path belongs to; memoised: the same paths recur in thousands of commits."""

    def __init__(self, families: dict[str, list[str]]):
        self._families = [
            (name, compile_globs(tuple(globs))) for name, globs in sorted(families.items())
        ]
        self._memo: dict[str, tuple[str, ...]] = {}

    def families_of(self, path: str) -> tuple[str, ...]:
        hit = self._memo.get(path)
        if hit is None:
            hit = tuple(name for name, rx in self._families if rx.match(path))
            self._memo[path] = hit
        return hit
