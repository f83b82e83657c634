"""Mining recipes (pr_archive/recipes/*.yaml, docs/pr-archive.md "Recipes"): loaded, or proposed
from a repository's directory and file names, and a lint for their globs."""

from __future__ import annotations

import re
from collections import defaultdict
from contextlib import suppress
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from kbase.ingest.mine_state import RECIPES_DIR, GitRepo, origin_url, read_recipe, recipe_file
from pydantic import ValidationError

from kbase.errors import ProblemsError
from kbase.schema import Problem, Recipe
from kbase.schema.archive import compile_globs


class RecipeError(ProblemsError):
    """A recipe file that does not load; `.problems` says where and why."""


def load_recipe_file(path: Path, root: Path | None = None) -> Recipe:
    shown = str(path)
    if root is not None:
        with suppress(ValueError):
            shown = str(path.resolve().relative_to(root.resolve()))
    try:
        text = read_recipe(path).decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc if isinstance(exc, UnicodeDecodeError) else exc.strerror
        raise RecipeError([Problem(path=shown, message=f"cannot read recipe: {why}")]) from None
    # a mine without a recipe imports no YAML
    from kbase.ingest.markdown import YamlProblem, load_yaml, validation_problems

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
    with suppress(FileNotFoundError):
        if (found := recipe_file(spec, "", root)) is not None:
            return found
    p = Path(spec)
    if p.suffix in (".yaml", ".yml") or p.exists():
        raise RecipeError([Problem(path=spec, message="recipe file does not exist")])
    known = sorted(x.stem for x in (root / RECIPES_DIR).glob("*.y*ml"))  # none: no folder
    why = f"no recipe named {spec!r} (known: {', '.join(known) or 'none'})"
    shown = str(RECIPES_DIR / f"{spec}.yaml")
    raise RecipeError([Problem(path=shown, field="recipe", message=why)])


def resolve_recipe(spec: str | None, name: str, root: Path) -> tuple[Recipe, Path | None]:
    """--recipe beats a recipe named like the archive; with neither, a recipe without families.
    Returns the recipe and the file it was read from (None: none)."""
    found = find_recipe(spec, root) if spec else recipe_file(None, name, root)
    if found is None:
        return Recipe(name=name), None
    recipe = load_recipe_file(found, root)
    # the archive name on the command line wins, so one recipe can serve a fork
    return recipe.model_copy(update={"name": name}), found


CODE_EXT = (".cu", ".cuh", ".cc", ".cpp", ".h", ".hpp", ".py", ".hip", ".inl")
# words that say nothing about a kernel family
_GENERIC = {
    "test", "tests", "utils", "util", "common", "init", "base", "types", "type", "config",
    "setup", "main", "api", "ops", "op", "kernel", "kernels", "impl", "cuda", "cpu", "csrc",
    "include", "src", "lib", "python", "torch", "py", "cu", "h", "cc", "bench", "benchmark",
    "benchmarks", "example", "examples", "docs", "doc", "helper", "helpers", "core", "module",
    "modules", "layer", "layers", "model", "models", "tools", "tool", "scripts", "script",
    "version", "env", "build", "jit", "aot", "pybind", "binding", "bindings", "wrapper",
    "wrappers", "interface", "registry", "launcher", "launch", "v1", "v2", "v3", "fwd", "bwd",
    "sm80", "sm90", "sm100", "and", "with", "for", "the", "of", "to", "a", "all", "templ",
    "template", "templates", "def", "defs", "generated", "gen", "inst", "instantiations",
}  # fmt: skip
_TOKEN = re.compile(r"[a-z][a-z0-9]*")


def tokens(name: str) -> list[str]:
    stem = name.rsplit("/", 1)[-1].rsplit(".", 1)[0].lower()
    return _TOKEN.findall(stem.replace("-", "_"))


def repo_paths(git_dir: str, history: bool = True) -> list[str]:
    """Paths at HEAD, and (history=True) every path the history ever touched."""
    git = partial(GitRepo(git_dir).run, "-c", "core.quotepath=false")
    head = git("ls-tree", "-r", "--name-only", "HEAD").splitlines()
    if not history:
        return head
    past = git("log", "--format=", "--name-only", "--no-renames", "HEAD").splitlines()
    return sorted(set(head) | {p for p in past if p})


def suggest_families(
    paths: list[str], min_files: int = 3, limit: int = 40, left_out: list[str] | None = None
) -> dict[str, list[str]]:
    """Families proposed from file names and directory names of the source files in `paths`,
    at most `limit`; `left_out` receives the names of those past the limit, largest first."""
    left = left_out if left_out is not None else []
    code = [p for p in paths if p.endswith(CODE_EXT)]
    by_token: dict[str, set[str]] = defaultdict(set)
    for p in code:
        for t in set(tokens(p)):
            if t not in _GENERIC and len(t) >= 3 and not t.isdigit():
                by_token[t].add(p)
    dirs: dict[str, set[str]] = defaultdict(set)
    for p in code:
        parts = p.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            name = parts[i - 1].lower()
            if name not in _GENERIC and len(name) >= 3:
                dirs["/".join(parts[:i])].add(p)
    families: dict[str, list[str]] = {}
    for t, files in sorted(by_token.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        if len(files) < min_files:
            continue
        if len(families) >= limit:
            left.append(t)
        else:
            families[t] = sorted({_token_glob(p, t) for p in files})
    for d, files in sorted(dirs.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        key = re.sub(r"[^a-z0-9]+", "-", d.rsplit("/", 1)[-1].lower()).strip("-")
        if len(files) < min_files or key in families or key in left:
            continue
        if all(key not in tokens(p) for p in files):  # not already a file-name family
            if len(families) >= limit:
                left.append(key)
            else:
                families[key] = [f"{d}/**"]
    return dict(sorted(families.items()))


def _token_glob(path: str, token: str) -> str:
    d, _, name = path.rpartition("/")
    ext = name.rsplit(".", 1)[-1] if "." in name else ""
    pat = f"*{token}*" + (f".{ext}" if ext else "")
    return f"{d}/{pat}" if d else pat


@dataclass
class GlobProblem:
    family: str
    glob: str
    message: str
    examples: list[str] = field(default_factory=list)


def lint_families(families: dict[str, list[str]], paths: list[str]) -> list[GlobProblem]:
    """A glob that matches no path in the repository's history, or that pulls in files whose
    names carry another family's name and not this family's."""
    problems: list[GlobProblem] = []
    fam_tokens = {f: set(_TOKEN.findall(f.lower().replace("-", "_"))) for f in families}
    for fam, globs in families.items():
        own = fam_tokens[fam]
        for g in globs:
            rx = compile_globs((g,))
            hits = [p for p in paths if rx.match(p)]
            if not hits:
                problems.append(GlobProblem(fam, g, "matches no path in the repository's history"))
                continue
            if "*" not in g.rsplit("/", 1)[-1] or g.endswith("**"):
                continue  # a directory family holds whatever is in it, by design
            stray: list[tuple[str, str]] = []
            for p in hits:
                toks = set(tokens(p))
                if toks & own:
                    continue  # the family's own word, whole: it belongs
                others = [o for o in families if o != fam and fam_tokens[o] <= toks]
                if others:
                    stray.append((p, others[0]))
            if stray:
                where = sorted({o for _, o in stray if o})
                why = f"pulls in {len(stray)} file(s) whose names do not say {fam!r}"
                why += f" (they name {', '.join(where)})" if where else ""
                problems.append(GlobProblem(fam, g, why, [p for p, _ in stray[:5]]))
    return problems


def recipe_yaml(
    name: str,
    upstream: str | None,
    families: dict[str, list[str]],
    left_out: list[str] | None = None,
) -> str:
    lines = ["# Proposed by `kbase recipe suggest` from directory and file names: edit before use."]
    if left_out:  # the limit is said, never applied silently (issue #27)
        shown = ", ".join(left_out[:20]) + (", ..." if len(left_out) > 20 else "")
        lines.append(
            f"# Stopped at {len(families)} families; {len(left_out)} more left out: {shown}"
        )
    lines.append(f"name: {name}")
    if upstream:
        lines.append(f"upstream: {upstream}")
    lines.append("families:")
    for fam, globs in families.items():
        lines.append(f"  {fam}:")
        lines.extend(f"    - {g!r}" if "*" in g[:1] else f"    - {g}" for g in globs)
    return "\n".join(lines) + "\n"


def suggest_for_repo(
    source: str | Path, name: str
) -> tuple[str, dict[str, list[str]], str | None, list[str]]:
    """(recipe text, families, upstream URL, names left out past the limit)."""
    from kbase.ingest.mining import open_repo

    repo = open_repo(source)
    paths = repo_paths(str(repo.git_dir), history=False)
    left: list[str] = []
    fams = suggest_families(paths, left_out=left)
    up = origin_url(str(repo.git_dir))
    return recipe_yaml(name, up, fams, left), fams, up, left
