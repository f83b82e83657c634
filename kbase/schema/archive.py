"""The PR archive: a card's front-matter (pr_archive/<name>/<N>.md), the recipe that shapes
the cards of one repository (pr_archive/recipes/<name>.yaml), and its path globs with git
`:(glob)` pathspec semantics (docs/pr-archive.md), shared by recipes, cards and watch rules, so a
family's PR set can be checked against `git log -- ':(glob)...'`."""

from __future__ import annotations

import functools
import hashlib
import json
import re

from pydantic import ConfigDict, Field, field_validator

from kbase.closed_sets import CardKind
from kbase.schema.base import Kebab, Model, Tags, check_url


class FileChange(Model):
    model_config = ConfigDict(extra="forbid")

    path: str
    added: int | None = None
    deleted: int | None = None
    symbols: list[str] = Field(default_factory=list)
    old_path: str | None = None
    # per symbol, who named it: tree-sitter | scanner (hunk-header: cards mined by older kbase)
    named_by: list[str] = Field(default_factory=list)
    kernels: list[str] = Field(default_factory=list)  # the symbols that are GPU kernels
    # git could not read the file's blob (missing or corrupt): no counts, yet not a binary file
    unreadable: bool = False


class PRCard(Model):
    """Front-matter of pr_archive/<name>/<N>.md (or commit-<short-sha>.md for a direct push)."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    pr: int | None
    kind: CardKind = "pr"
    url: str | None = None
    sha: str
    date: str
    title: str
    families: list[str] = Field(default_factory=list)
    files: list[FileChange] = Field(default_factory=list)
    totals: dict[str, int] = Field(default_factory=dict)
    categories: list[str] = Field(default_factory=list)
    reverts: int | None = None
    tags: Tags = Field(default_factory=Tags)
    reverts_commit: str | None = None  # a reverted direct push (its sha, as the body names it)
    reverted_by: list[str] = Field(default_factory=list)  # "#N" for a PR, a short sha for a push
    description: str | None = None  # the commit body, cleaned of template boilerplate
    co_authors: list[str] = Field(default_factory=list)
    issues: list[int] = Field(default_factory=list)
    numbers: list[str] = Field(default_factory=list)  # numbers with units from the description
    touched: list[str] = Field(default_factory=list)  # symbols, ranked: kernels first, tests last
    key_diff: str | None = None  # at most 20 diff lines from the most significant hunks
    also: list[str] = Field(default_factory=list)  # other commits that carry the same PR number


class Recipe(Model):
    """pr_archive/recipes/<name>.yaml: a repository, its upstream and its families' path globs."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: Kebab = Field(min_length=1, description="archive name: pr_archive/<name>/")
    upstream: str | None = Field(default=None, description="https://github.com/<owner>/<repo>")
    description: str | None = None
    families: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("upstream")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return check_url(v, "upstream").rstrip("/") if v is not None else v

    @field_validator("families")
    @classmethod
    def _families(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for fam, globs in v.items():
            if not re.match(r"^[a-z0-9][a-z0-9_.-]*$", str(fam)):
                raise ValueError(f"family {fam!r}: use lowercase letters, digits, '.', '_' or '-'")
            if not globs or not all(isinstance(g, str) and g.strip() for g in globs):
                raise ValueError(f"family {fam!r} needs a non-empty list of path globs")
            try:  # the family's matcher (Recipe.matcher) compiles, and is kept, or ...
                compile_globs(tuple(globs))
            except Exception:  # ... the glob that fails says so: ValueError on a malformed one
                for g in globs:
                    compile_glob(g)
                raise
        return v

    def pr_url(self, pr: int) -> str | None:
        return f"{self.upstream}/pull/{pr}" if self.upstream else None

    def digest(self) -> str:
        """Changes when anything that shapes a card changes (families, upstream)."""
        blob = json.dumps({"upstream": self.upstream, "families": self.families}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def matcher(self):
        return FamilyMatcher(self.families)


# "**/", "**", "*", "?", a character class (a leading "!" or "]" is part of it), or one character
_TOKEN = r"\*\*/?|[*?]|\[(?:!|\])?+[^]]*\]|."  # compiled on first use, not at import
_WILD = {"**/": "(?:.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}


def _glob_body(pattern: str) -> str:
    out: list[str] = []
    for tok in re.findall(_TOKEN, pattern, re.S):
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
