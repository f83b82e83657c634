"""Mining recipes (pr_archive/recipes/*.yaml) and the path-glob matcher they use.

A recipe names a repository, its upstream URL (for PR links) and its families:
model or kernel families mapped to path globs inside the repository.

Glob semantics follow git's `:(glob)` pathspecs, so a family's PR set can be
checked against `git log --first-parent -- ':(glob)<pattern>'`:
  `*` and `?` stay inside one path segment, `**` crosses segments
  (`a/**/b` also matches `a/b`), `[...]` is a character class; a pattern
  without wildcards also matches everything below the directory it names,
  one with wildcards only whole paths (kbase.globs).
"""

from __future__ import annotations

from pathlib import Path

from kbase.ingest.mine_state import RECIPES_DIR, read_recipe, recipe_file
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import Problem, Recipe


class RecipeError(ProblemsError):
    """A recipe file that does not load; `.problems` says where and why."""


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
        msg = {"extra_forbidden": "unknown key", "missing": "required key is missing"}.get(
            err["type"], err["msg"]
        )
        out.append(
            Problem(path=shown, line=line, field=".".join(map(str, loc)) or None, message=msg)
        )
    return out


def load_recipe_file(path: Path, root: Path | None = None) -> Recipe:
    shown = str(path)
    if root is not None:
        try:
            shown = str(path.resolve().relative_to(root.resolve()))
        except ValueError:
            pass
    try:
        text = read_recipe(path).decode("utf-8")
    except OSError as exc:
        raise RecipeError(
            [Problem(path=shown, message=f"cannot read recipe: {exc.strerror}")]
        ) from None
    except UnicodeDecodeError as exc:
        raise RecipeError([Problem(path=shown, message=f"cannot read recipe: {exc}")]) from None
    from kbase.ingest.safe_yaml import YamlProblem, load_yaml  # a mine without a recipe: no yaml

    try:
        data, node = load_yaml(text, shown, first_line=1)
    except YamlProblem as exc:
        raise RecipeError(exc.problems) from None
    if not isinstance(data, dict):
        raise RecipeError([Problem(path=shown, line=1, message="a recipe must be a YAML mapping")])
    try:
        return Recipe.model_validate(data)
    except ValidationError as exc:
        raise RecipeError(validation_problems(exc, shown, node, first_line=1)) from None


def find_recipe(spec: str, root: Path) -> Path:
    """A recipe by file path, or by name under <root>/pr_archive/recipes/."""
    try:
        found = recipe_file(spec, "", root)
    except FileNotFoundError:
        found = None
    if found is not None:
        return found
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists():
        raise RecipeError([Problem(path=spec, message="recipe file does not exist")])
    known = (
        sorted(x.stem for x in (root / RECIPES_DIR).glob("*.y*ml"))
        if (root / RECIPES_DIR).is_dir()
        else []
    )
    raise RecipeError(
        [
            Problem(
                path=str(RECIPES_DIR / f"{spec}.yaml"),
                field="recipe",
                message=f"no recipe named {spec!r} (known: {', '.join(known) or 'none'})",
            )
        ]
    )


def resolve_recipe(spec: str | None, name: str, root: Path) -> tuple[Recipe, Path | None]:
    """--recipe beats a recipe named like the archive; with neither, a recipe without families.
    Returns the recipe and the file it was read from (None: none)."""
    if spec:
        found: Path | None = find_recipe(spec, root)
    else:
        found = recipe_file(None, name, root)
    if found is None:
        return Recipe(name=name), None
    recipe = load_recipe_file(found, root)
    # the archive name on the command line wins, so one recipe can serve a fork
    return recipe.model_copy(update={"name": name}), found
