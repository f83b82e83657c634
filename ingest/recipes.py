"""Mining recipes (pr_archive/recipes/*.yaml) and the path-glob matcher they use.

A recipe names a repository, its upstream URL (for PR links) and its families:
model or kernel families mapped to path globs inside the repository.

Glob semantics follow git's `:(glob)` pathspecs, so a family's PR set can be
checked against `git log --first-parent -- ':(glob)<pattern>'`:
  `*` and `?` stay inside one path segment, `**` crosses segments
  (`a/**/b` also matches `a/b`), `[...]` is a character class, and a pattern
  that names a directory also matches everything below it.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from pathlib import Path
from typing import Iterable, Optional

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kbase.schema import NAME_RE, Problem

RECIPES_DIR = Path("pr_archive") / "recipes"


class RecipeError(Exception):
    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


class Recipe(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    name: str = Field(min_length=1, description="archive name: pr_archive/<name>/")
    upstream: Optional[str] = Field(default=None, description="https://github.com/<owner>/<repo>")
    description: Optional[str] = None
    families: dict[str, list[str]] = Field(default_factory=dict)

    @field_validator("name")
    @classmethod
    def _kebab(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("name must be kebab-case: lowercase letters, digits and single hyphens")
        return v

    @field_validator("upstream")
    @classmethod
    def _url(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not re.match(r"^https?://\S+$", v):
            raise ValueError(f"upstream is not an http(s) URL: {v!r}")
        return v.rstrip("/") if v else v

    @field_validator("families")
    @classmethod
    def _families(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for fam, globs in v.items():
            if not re.match(r"^[a-z0-9][a-z0-9_.-]*$", str(fam)):
                raise ValueError(f"family {fam!r}: use lowercase letters, digits, '.', '_' or '-'")
            if not globs or not all(isinstance(g, str) and g.strip() for g in globs):
                raise ValueError(f"family {fam!r} needs a non-empty list of path globs")
            for g in globs:
                compile_glob(g)  # raises ValueError on a malformed pattern
        return v

    def pr_url(self, pr: int) -> Optional[str]:
        return f"{self.upstream}/pull/{pr}" if self.upstream else None

    def digest(self) -> str:
        """Changes when anything that shapes a card changes (families, upstream)."""
        blob = json.dumps({"upstream": self.upstream, "families": self.families}, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def matcher(self) -> "FamilyMatcher":
        return FamilyMatcher(self.families)


# --------------------------------------------------------------------------- globs


def _glob_body(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "]") else i + 1)
            if j < 0:
                raise ValueError(f"glob {pattern!r}: unclosed '['")
            inner = pattern[i + 1 : j]
            if inner.startswith("!"):
                inner = "^" + inner[1:]
            out.append("[" + inner.replace("\\", "\\\\") + "]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@functools.lru_cache(maxsize=4096)
def compile_glob(pattern: str) -> re.Pattern[str]:
    p = pattern.strip()
    if not p:
        raise ValueError("empty glob")
    p = p.lstrip("/")
    if p.endswith("/"):
        p = p + "**"
    # a pattern also matches the contents of a directory it names, like a git pathspec
    return re.compile(_glob_body(p) + r"(?:/.*)?\Z")


@functools.lru_cache(maxsize=1024)
def compile_globs(patterns: tuple[str, ...]) -> re.Pattern[str]:
    if not patterns:
        return re.compile(r"(?!)")
    return re.compile("|".join(f"(?:{compile_glob(p).pattern})" for p in patterns))


def glob_match(path: str, patterns: Iterable[str]) -> bool:
    return compile_globs(tuple(patterns)).match(path) is not None


class FamilyMatcher:
    """Which families a path belongs to; memoised, since the same paths recur in thousands of commits."""

    def __init__(self, families: dict[str, list[str]]):
        self._families = [(name, compile_globs(tuple(globs))) for name, globs in sorted(families.items())]
        self._memo: dict[str, tuple[str, ...]] = {}

    def families_of(self, path: str) -> tuple[str, ...]:
        hit = self._memo.get(path)
        if hit is None:
            hit = tuple(name for name, rx in self._families if rx.match(path))
            self._memo[path] = hit
        return hit

    def __bool__(self) -> bool:
        return bool(self._families)


# --------------------------------------------------------------------------- loading


def validation_problems(exc: ValidationError, shown: str, node, first_line: int) -> list[Problem]:
    """Pydantic errors as Problems at the line of the offending YAML key.

    `first_line` is the file line where the YAML starts: 1 for a recipe, 2 for card front-matter.
    """
    from kbase.ingest.markdown import node_line

    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        # node_line counts from front-matter that starts on line 2
        line = max(1, node_line(node, loc) - 2 + first_line) if node is not None else first_line
        msg = {"extra_forbidden": "unknown key", "missing": "required key is missing"}.get(err["type"], err["msg"])
        out.append(Problem(path=shown, line=line, field=".".join(map(str, loc)) or None, message=msg))
    return out


def load_recipe_file(path: Path, root: Optional[Path] = None) -> Recipe:
    shown = str(path)
    if root is not None:
        try:
            shown = str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RecipeError([Problem(path=shown, message=f"cannot read recipe: {exc.strerror}")]) from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 1
        raise RecipeError([Problem(path=shown, line=line, message=f"malformed YAML: {getattr(exc, 'problem', exc)}")]) from None
    if not isinstance(data, dict):
        raise RecipeError([Problem(path=shown, line=1, message="a recipe must be a YAML mapping")])
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(validation_problems(exc, shown, node, first_line=1)) from None


def find_recipe(spec: str, root: Path) -> Path:
    """A recipe by file path, or by name under <root>/pr_archive/recipes/."""
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.exists():
            raise RecipeError([Problem(path=spec, message="recipe file does not exist")])
        return p
    for ext in (".yaml", ".yml"):
        cand = root / RECIPES_DIR / f"{spec}{ext}"
        if cand.exists():
            return cand
    known = sorted(x.stem for x in (root / RECIPES_DIR).glob("*.y*ml")) if (root / RECIPES_DIR).is_dir() else []
    raise RecipeError([Problem(path=str(RECIPES_DIR / f"{spec}.yaml"), field="recipe",
                               message=f"no recipe named {spec!r} (known: {', '.join(known) or 'none'})")])


def resolve_recipe(spec: Optional[str], name: str, root: Path) -> Recipe:
    """--recipe beats a recipe named like the archive; with neither, a recipe without families."""
    if spec:
        recipe = load_recipe_file(find_recipe(spec, root), root)
    else:
        named = [root / RECIPES_DIR / f"{name}{ext}" for ext in (".yaml", ".yml")]
        found = next((p for p in named if p.exists()), None)
        if found is None:
            return Recipe(name=name)
        recipe = load_recipe_file(found, root)
    # the archive name on the command line wins, so one recipe can serve a fork
    return recipe.model_copy(update={"name": name})
